"""The embedded default backend: one LevelDB database (plyvel) for all tables, with
large values kept in a value log beside it (``vlog.py``).

Every value LevelDB holds starts with a tag byte: ``0`` and the value itself, or the
value log's pointer (tag ``1``). Callers see plain values either way.

A full disk (``space.py``): the backend measures free space before writes, turns ENOSPC
into DiskFull, and after any failed LevelDB write starts a new LevelDB log before writing
again (reopening LevelDB if it refuses to), since appending after a torn record loses
acknowledged writes at recovery.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import plyvel

from . import vlog
from .backend import Mutation
from .errors import BackendError, DiskFull
from .space import RESERVE_NAME, SpaceGuard, is_enospc
from .vlog import TAG_POINTER, ValueLog

log = logging.getLogger(__name__)

# Values at least this long go to the value log; shorter ones stay inline in LevelDB,
# where a second file write and fsync would cost more than compaction saves.
VALUE_LOG_MIN_BYTES = 256
# A small write (at most this many mutations and bytes: a message at a time at low
# rates, a few Kafka transactions' commits with their state rows) keeps its values
# inline unless they are huge: the value log's extra write and fsync would add ~0.5 ms
# to every acknowledgement, while the compaction it saves grows with bytes written,
# which the byte bound keeps small. Bytes count most: one packed row holds a whole
# produced batch (keys.F_PACKED), and inline, 100 KB a write filled LevelDB. (At 16
# mutations, four producers' 10-record transactions went through the value log: two
# fsyncs a write instead of one.)
SMALL_WRITE_MUTATIONS = 256
SMALL_WRITE_BYTES = 64 << 10
SMALL_WRITE_VALUE_LOG_MIN_BYTES = 64 << 10
VLOG_DIR = "vlog"
WRITE_BUFFER_BYTES = 64 << 20
MIN_WRITE_BUFFER_BYTES = 4 << 20
# After a failed write, LevelDB's memtable is flushed over an empty key range past every
# key (tables start with a letter), which starts a new log and compacts nothing else; a
# tombstone for a key before every key then tells whether LevelDB writes again.
_ROTATE_KEY = b"\xff\xfftmsgate:rotate"
_PROBE_KEY = b"\x00tmsgate:probe"
# Reopening waits at most this long for readers to let go of the old handle; failing
# that, the next write (or janitor pass) tries again.
QUIESCE_S = 2.0
REOPEN_RETRY_S = 1.0
REOPEN_HEADROOM = 4 << 20  # beyond the logs replayed into a table: manifest, new log


class LevelDBBackend:
    # One LevelDB write batch is atomic, so the store writes all its phases as one batch
    # and needs no intents (writer.Batch).
    atomic_batches = True
    seek_offset = None  # reader.py's search: a LevelDB seek per probe is cheap

    def __init__(
        self,
        path: str,
        temporary: bool = False,
        vlog_segment_bytes: int | None = None,
        disk_reserve_bytes: int | None = None,
        write_buffer_bytes: int | None = None,
    ) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = path
        self._temporary = temporary
        if write_buffer_bytes is None:
            write_buffer_bytes = WRITE_BUFFER_BYTES
            if disk_reserve_bytes:
                # Flushing the memtable writes a table as large as it before the log goes,
                # and after a failed write (and at every open) that flush must fit in what
                # the reserve frees: so the memtable never outgrows the reserve.
                write_buffer_bytes = min(
                    write_buffer_bytes, max(disk_reserve_bytes, MIN_WRITE_BUFFER_BYTES)
                )
        self._write_buffer_bytes = write_buffer_bytes
        vlog_dir = os.path.join(path, VLOG_DIR)
        if os.path.exists(os.path.join(path, "CURRENT")) and not os.path.isdir(vlog_dir):
            raise BackendError(
                f"the store at {path} was written by an older tmsgate (values without "
                "tags, no value log); it cannot be opened by this version"
            )
        self._write_lock = threading.Lock()
        # The reserve is settled first: LevelDB's open writes (a table from its log, a
        # new manifest), and on a full disk it is the reserve that makes room for that.
        self.space = SpaceGuard(path, None if temporary else disk_reserve_bytes)
        self.space.open()
        self._wedged: BaseException | None = None  # LevelDB refuses writes until reopened
        self._next_reopen = 0.0
        try:
            self._db: Any = self._open_db()
        except plyvel.IOError as exc:
            if not (is_enospc(exc) and self.space.release_for_open(exc)):
                raise BackendError(_open_error(path, exc)) from exc
            try:
                self._db = self._open_db()  # with the reserve's room
            except plyvel.IOError as again:
                raise BackendError(_open_error(path, again)) from again
        try:
            # Created after LevelDB holds the lock, so two processes never share it.
            self._vlog = ValueLog(vlog_dir, vlog_segment_bytes or vlog.SEGMENT_BYTES)
        except OSError as exc:
            self._db.close()
            raise BackendError(f"cannot open the value log in {vlog_dir}: {exc}") from exc

    def _open_db(self) -> Any:
        return plyvel.DB(
            self.path,
            create_if_missing=True,
            write_buffer_size=self._write_buffer_bytes,
            lru_cache_size=128 << 20,
            block_size=16 << 10,
            bloom_filter_bits=10,
            # Payloads are mostly already compressed or random; snappy costs more than it saves.
            compression=None,
        )

    def write(self, mutations: Sequence[Mutation], sync: bool = True) -> None:
        small = len(mutations) <= SMALL_WRITE_MUTATIONS and (
            sum(len(v) for _, v in mutations if v is not None) < SMALL_WRITE_BYTES
        )
        min_bytes = SMALL_WRITE_VALUE_LOG_MIN_BYTES if small else VALUE_LOG_MIN_BYTES
        with self._write_lock:
            self.space.before_write()
            if self._wedged is not None:
                self._unwedge()
            self._write_locked(mutations, sync, min_bytes)

    def write_phases(self, phases: Sequence[Sequence[Mutation]], sync: bool = True) -> None:
        # One LevelDB batch is atomic, which is stronger than the order phases ask for.
        if len(phases) == 1:
            self.write(phases[0], sync)
        else:
            self.write([m for phase in phases for m in phase], sync)

    def check_and_put(self, key: bytes, expected: bytes | None, value: bytes | None) -> bool:
        """Under the write lock, which every write and value-log move takes, so nothing
        comes between the compare and the write. Compares values as ``get`` returns them
        (not a large value's value-log pointer); writes as ``write`` does, synced."""
        return self.check_and_put_many([(key, expected, value)])[0]

    def check_and_put_many(
        self, changes: Sequence[tuple[bytes, bytes | None, bytes | None]]
    ) -> list[bool]:
        """Every compare under the write lock (check_and_put's), the winners written as one
        synced batch."""
        with self._write_lock:
            self.space.before_write()
            if self._wedged is not None:
                self._unwedge()
            won: list[bool] = []
            written: dict[bytes, bytes | None] = {}  # what this call wrote so far
            for key, expected, value in changes:
                current = written[key] if key in written else self.get(key)
                won.append(current == expected)
                if won[-1]:
                    written[key] = value
            if written:
                self._write_locked(list(written.items()), True, SMALL_WRITE_VALUE_LOG_MIN_BYTES)
            return won

    def _write_locked(self, mutations: Sequence[Mutation], sync: bool, min_bytes: int) -> None:
        vlog = self._vlog
        batch = self._db.write_batch(sync=sync)
        try:
            separated = vlog.stage(mutations, batch.put, batch.delete, min_bytes)
            if separated:
                vlog.flush(sync)  # the values are on disk before the rows that point at them
        except BackendError as exc:
            if is_enospc(exc):
                raise self.space.write_failed(exc.__cause__ or exc, "value log") from exc
            raise
        try:
            batch.write()
        except plyvel.Error as exc:
            # Both hold the handle, which _rotate_log may have to close: the batch, and the
            # frames in the error's traceback (none from plyvel itself, but a wrapper's).
            del batch
            exc.__traceback__ = None
            if separated:
                vlog.discard()
            error: BackendError = BackendError(f"LevelDB write failed: {_text(exc)}")
            if is_enospc(exc):
                # Before rotating: flushing the memtable needs the reserve's room.
                error = self.space.write_failed(exc, "LevelDB")
            self._rotate_log(exc)
            raise error from exc
        vlog.written()

    # --- after a failed LevelDB write -----------------------------------------------------
    def _rotate_log(self, cause: BaseException) -> None:
        """Start a new LevelDB log before anything else is written.

        A failed write can leave part of its record at the end of LevelDB's log, and
        LevelDB appends the next records after it; at recovery its reader then drops the
        rest of that 32 KiB block, acknowledged writes with it (on a full tmpfs, all 501
        writes acknowledged after the failure were gone after a reopen). Flushing the
        memtable starts a new log and leaves the torn record at the end of the old one,
        where recovery ignores it. If the flush fails too, LevelDB refuses every write
        from then on (a failed background write is final for an open handle), and only
        reopening it helps."""
        try:
            self._db.compact_range(start=_ROTATE_KEY, stop=_ROTATE_KEY)
            self._db.delete(_PROBE_KEY, sync=True)
            return
        except plyvel.Error as exc:
            self._wedged = exc.with_traceback(None)  # kept: its frames must not hold the handle
        log.error(
            "LevelDB at %s refuses writes after a failed write (%s); reopening it",
            self.path,
            _text(cause),
        )
        self._next_reopen = time.monotonic() + REOPEN_RETRY_S
        self._reopen()

    def _unwedge(self) -> None:
        """Reopen LevelDB if it refuses writes (at most once per REOPEN_RETRY_S); raise
        if it still does."""
        now = time.monotonic()
        if now >= self._next_reopen:
            self._next_reopen = now + REOPEN_RETRY_S
            if self._reopen():
                return
        exc = self._wedged
        if is_enospc(exc):
            raise DiskFull(
                self.space.free_bytes,
                max(self.space.resume_bytes, self._reopen_bytes()),
                f"LevelDB refuses writes until it is reopened: {_text(exc)}",
            )
        raise BackendError(f"LevelDB refuses writes until it is reopened: {_text(exc)}")

    def _log_bytes(self) -> int:
        total = 0
        for name in os.listdir(self.path):
            if name.endswith(".log"):
                try:
                    total += os.path.getsize(os.path.join(self.path, name))
                except OSError:
                    continue
        return total

    def _reopen_bytes(self) -> int:
        # Opening replays the logs into a table before deleting them.
        return self._log_bytes() + REOPEN_HEADROOM

    def _reopen(self) -> bool:
        """Close LevelDB and open it again, under the write lock. -> whether it worked.

        Readers run on other threads, and a plyvel call still running on a handle being
        closed would use freed memory. So readers are first pointed at a stand-in that
        waits for the new handle, and the old one is closed only once nothing refers to
        it any more: a reader inside a call, or holding an iterator, holds a reference.
        Only tried when the disk has room to replay the logs, else an open that failed
        would leave no handle at all and stop reads too."""
        need = self._reopen_bytes()
        free = self.space.measure()
        if free < need:
            log.warning(
                "LevelDB at %s is reopened once %d MiB are free (%.1f MiB now)",
                self.path,
                need >> 20,
                free / (1 << 20),
            )
            return False
        old = self._db
        gate = _Reopening(self)
        self._db = gate
        try:
            if not isinstance(old, _Reopening):
                deadline = time.monotonic() + QUIESCE_S
                collected = False
                # Two references are ours: `old` and getrefcount's argument.
                while sys.getrefcount(old) > 2:
                    if time.monotonic() > deadline:
                        log.warning("LevelDB at %s is still read; reopened later", self.path)
                        self._db = old
                        return False
                    if not collected:  # an abandoned iterator in a reference cycle
                        gc.collect()
                        collected = True
                    time.sleep(0.001)
                old.close()
            old = None
            try:
                self._db = self._open_db()
            except plyvel.Error as exc:
                gate.failed = BackendError(
                    f"LevelDB at {self.path} could not be reopened: {_text(exc)}"
                )
                self._wedged = exc.with_traceback(None)
                log.error("LevelDB at %s could not be reopened: %s", self.path, _text(exc))
                return False
            self._wedged = None
            log.warning("LevelDB at %s reopened; it accepts writes again", self.path)
            return True
        finally:
            gate.done.set()

    def get(self, key: bytes) -> bytes | None:
        value = self._db.get(key)
        if value is None or value[0] != TAG_POINTER:
            return value[1:] if value is not None else None
        return self._vlog.read(value)

    def scan(
        self,
        start: bytes,
        stop: bytes,
        *,
        reverse: bool = False,
        include_start: bool = True,
    ) -> Iterator[tuple[bytes, bytes]]:
        read = self._vlog.read
        for key, value in self.scan_stored(
            start, stop, reverse=reverse, include_start=include_start
        ):
            yield key, (value[1:] if value[0] != TAG_POINTER else read(value))

    def scan_heads(
        self, start: bytes, stop: bytes, head: int
    ) -> Iterator[tuple[bytes, bytes, int]]:
        read = self._vlog.read
        length_of = vlog.POINTER.unpack_from
        at, kept = vlog.POINTER.size, vlog.POINTER.size + head  # where a pointer's head is
        for key, value in self.scan_stored(start, stop):
            if value[0] != TAG_POINTER:
                yield key, value[1 : 1 + head], len(value) - 1
            elif len(value) >= kept:
                yield key, value[at:kept], length_of(value)[3]
            else:  # a pointer written without the value's head, or a longer head wanted
                yield key, read(value, head), length_of(value)[3]

    def scan_stored(
        self,
        start: bytes,
        stop: bytes,
        *,
        reverse: bool = False,
        include_start: bool = True,
    ) -> Iterator[tuple[bytes, bytes]]:
        """``scan`` with each value as LevelDB holds it: tagged, either the value itself
        (tag 0) or a pointer into the value log (vlog.POINTER). A served:// worker reads the
        pointed-at values from the segment files itself (served.SegmentReader)."""
        reverse, include_start = bool(reverse), bool(include_start)  # plyvel takes only bools
        it = self._db.iterator(start=start, stop=stop, reverse=reverse, include_start=include_start)
        found = False
        try:
            for key, value in it:
                found = True
                yield key, value
        finally:
            it.close()
        if reverse and include_start and not found and start < stop:
            # plyvel 1.5 ends a reverse scan before a ``start`` row that is the only row in
            # range (Iterator.real_prev compares without include_start).
            value = self._db.get(start)
            if value is not None:
                yield start, value

    def scan_keys(self, start: bytes, stop: bytes) -> Iterator[bytes]:
        # Without values: a large value-log value would be read (and its segment kept in
        # the page cache) for nothing. The janitor deletes by key: 2026-11-27, reading
        # them was a fifth of its time while it cleaned up a deleted topic.
        it = self._db.iterator(start=start, stop=stop, include_value=False)
        try:
            yield from it
        finally:
            it.close()

    def sync_clock(self) -> None:
        pass  # one process owns a LevelDB store

    def collect_garbage(self) -> dict[str, int]:
        """Delete value-log segments that no row points into any more, moving the few
        live values of mostly dead segments first. Moving takes space before deleting the
        segment gives more back, so it may take at most half of the space above the floor
        (of all free space while writes are refused for a full disk, when the segment
        being written is also sealed first, so that it can go too)."""
        space = self.space
        if space.refused:
            with self._write_lock:
                self._vlog.seal()
            budget = space.measure() // 2
        else:
            budget = max(0, space.measure() - space.floor_bytes) // 2
        # self._db is looked up per call, not bound once: a reopen may replace it.
        stats = self._vlog.collect(
            lambda key, pointer: _holds(self._db.get(key), pointer), self._relocate, budget
        )
        if self._wedged is not None:  # the space freed may be what reopening needs
            with self._write_lock, contextlib.suppress(BackendError):
                if self._wedged is not None:
                    self._unwedge()
        space.look()
        return stats

    def _relocate(self, entries: list[tuple[bytes, bytes, bytes]]) -> int:
        # Under the write lock, so no write can come between the check and the put: a
        # key rewritten or deleted since the pointer was read keeps its newer state.
        with self._write_lock:
            get = self._db.get
            moved = [(k, value) for k, pointer, value in entries if _holds(get(k), pointer)]
            del get
            if moved:
                if self._wedged is not None:
                    self._unwedge()
                self._write_locked(moved, True, 0)  # min 0: every value back into the log
            return len(moved)

    def close(self) -> None:
        db = self._db
        if isinstance(db, _Reopening) or not db.closed:
            with self._write_lock:
                self._vlog.close()
            if not isinstance(db, _Reopening):
                db.close()
        if self._temporary:
            shutil.rmtree(self.path, ignore_errors=True)


def _holds(stored: bytes | None, pointer: bytes) -> bool:
    """Whether LevelDB's value is ``pointer`` (vlog.POINTER), with or without the value's
    head after it (vlog.STORED_POINTER)."""
    return stored is not None and stored[: len(pointer)] == pointer


def open_url(
    rest: str, snapshot: bool = False, disk_reserve_bytes: int | None = None
) -> LevelDBBackend:
    """``leveldb://`` + a path: ``/abs/path`` or ``./relative``."""
    if not rest:
        raise BackendError("a leveldb:// store URL needs a path, e.g. leveldb:///var/lib/tms")
    if snapshot:
        return LevelDBBackend(snapshot_copy(rest), temporary=True)
    return LevelDBBackend(rest, disk_reserve_bytes=disk_reserve_bytes)


class _Reopening:
    """Stands in for the LevelDB handle while it is closed and opened again: a reader
    waits for the new handle (or gets the error that kept it from opening)."""

    WAIT_S = 60.0

    def __init__(self, backend: LevelDBBackend) -> None:
        self._backend = backend
        self.done = threading.Event()
        self.failed: BackendError | None = None

    def __getattr__(self, name: str) -> Any:
        if not self.done.wait(self.WAIT_S):
            raise BackendError("LevelDB is being reopened")
        db = self._backend._db
        if db is self:
            raise self.failed or BackendError("LevelDB is being reopened")
        return getattr(db, name)


def _text(exc: BaseException | None) -> str:
    """plyvel's messages are bytes."""
    arg = exc.args[0] if exc is not None and exc.args else exc
    return arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)


def _open_error(path: str, exc: BaseException) -> str:
    if is_enospc(exc):
        return (
            f"cannot open LevelDB at {path}: {_text(exc)}: the disk is full and there is no "
            f"reserve ({RESERVE_NAME}) left to release; free some space and start again"
        )
    hint = " (is a gateway running on it?)" if "lock" in str(exc).lower() else ""
    return f"cannot open LevelDB at {path}: {_text(exc)}{hint}"


def snapshot_copy(path: str) -> str:
    """Copy a LevelDB directory that another process may hold open.

    Table files never change once written, so they are hard-linked; the log, manifest and
    CURRENT are copied. LevelDB recovers the copy like a crashed database, which is what
    an acknowledged-and-fsynced write survives anyway. Value-log segments only grow, so
    they are hard-linked too: before LevelDB's files (a segment deleted meanwhile is kept)
    and once more after them (a segment started meanwhile is included)."""
    if not os.path.isdir(path):
        raise BackendError(f"no store at {path}")
    dest = tempfile.mkdtemp(prefix="tmsgate-snapshot-")
    _link_segments(os.path.join(path, VLOG_DIR), os.path.join(dest, VLOG_DIR))
    for name in sorted(os.listdir(path), key=lambda n: not n.endswith((".ldb", ".sst"))):
        src = os.path.join(path, name)
        if name in ("LOCK", RESERVE_NAME, RESERVE_NAME + ".tmp") or os.path.isdir(src):
            continue
        try:
            if name.endswith((".ldb", ".sst")):
                os.link(src, os.path.join(dest, name))
            else:
                shutil.copy2(src, os.path.join(dest, name))
        except FileNotFoundError:
            continue  # compacted away while copying; the manifest copied later won't need it
        except OSError:
            shutil.copy2(src, os.path.join(dest, name))
    _link_segments(os.path.join(path, VLOG_DIR), os.path.join(dest, VLOG_DIR))
    return dest


def _link_segments(src_dir: str, dest_dir: str) -> None:
    os.makedirs(dest_dir, exist_ok=True)
    if not os.path.isdir(src_dir):
        return
    for name in os.listdir(src_dir):
        src, target = os.path.join(src_dir, name), os.path.join(dest_dir, name)
        try:
            if os.path.exists(target):
                if os.path.samefile(src, target):
                    continue  # linked: it sees everything appended since
                # Copied (another file system): the active segment may have grown since.
                shutil.copy2(src, target)
                continue
            os.link(src, target)
        except FileNotFoundError:
            continue  # collected meanwhile: nothing the copy's LevelDB points at
        except OSError:
            shutil.copy2(src, target)
