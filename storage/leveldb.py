"""The embedded default backend: one LevelDB database (plyvel) for all tables, with
large values kept in a value log beside it (``vlog.py``).

Every value LevelDB holds starts with a tag byte: ``0`` and the value itself, or the
value log's pointer (tag ``1``). Callers see plain values either way.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence

import plyvel

from . import vlog
from .backend import Mutation
from .errors import BackendError
from .vlog import TAG_POINTER, ValueLog

# Values at least this long go to the value log; shorter ones stay inline in LevelDB,
# where a second file write and fsync would cost more than compaction saves.
VALUE_LOG_MIN_BYTES = 256
# A write of at most this many mutations (one message at a time, at low rates) keeps its
# values inline unless they are huge: the value log's extra write and fsync would add
# ~0.5 ms to every acknowledgement, while the compaction it saves grows with bytes
# written, which a trickle hardly has.
SMALL_WRITE_MUTATIONS = 16
SMALL_WRITE_VALUE_LOG_MIN_BYTES = 64 << 10
VLOG_DIR = "vlog"


class LevelDBBackend:
    def __init__(
        self, path: str, temporary: bool = False, vlog_segment_bytes: int | None = None
    ) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = path
        self._temporary = temporary
        vlog_dir = os.path.join(path, VLOG_DIR)
        if os.path.exists(os.path.join(path, "CURRENT")) and not os.path.isdir(vlog_dir):
            raise BackendError(
                f"the store at {path} was written by an older tmsgate (values without "
                "tags, no value log); it cannot be opened by this version"
            )
        self._write_lock = threading.Lock()
        try:
            self._db = plyvel.DB(
                path,
                create_if_missing=True,
                write_buffer_size=64 << 20,
                lru_cache_size=128 << 20,
                block_size=16 << 10,
                bloom_filter_bits=10,
                # Payloads are mostly already compressed or random; snappy costs more than it saves.
                compression=None,
            )
        except plyvel.IOError as exc:
            hint = " (is a gateway running on it?)" if "lock" in str(exc).lower() else ""
            raise BackendError(f"cannot open LevelDB at {path}: {exc}{hint}") from exc
        try:
            # Created after LevelDB holds the lock, so two processes never share it.
            self._vlog = ValueLog(vlog_dir, vlog_segment_bytes or vlog.SEGMENT_BYTES)
        except OSError as exc:
            self._db.close()
            raise BackendError(f"cannot open the value log in {vlog_dir}: {exc}") from exc

    def write(self, mutations: Sequence[Mutation], sync: bool = True) -> None:
        min_bytes = (
            VALUE_LOG_MIN_BYTES
            if len(mutations) > SMALL_WRITE_MUTATIONS
            else SMALL_WRITE_VALUE_LOG_MIN_BYTES
        )
        with self._write_lock:
            self._write_locked(mutations, sync, min_bytes)

    def _write_locked(self, mutations: Sequence[Mutation], sync: bool, min_bytes: int) -> None:
        vlog = self._vlog
        batch = self._db.write_batch(sync=sync)
        separated = vlog.stage(mutations, batch.put, batch.delete, min_bytes)
        if separated:
            vlog.flush(sync)  # the values are on disk before the rows that point at them
        try:
            batch.write()
        except plyvel.Error as exc:
            if separated:
                vlog.discard()
            raise BackendError(f"LevelDB write failed: {exc}") from exc
        vlog.written()

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
        it = self._db.iterator(start=start, stop=stop, reverse=reverse, include_start=include_start)
        read = self._vlog.read
        try:
            for key, value in it:
                yield key, (value[1:] if value[0] != TAG_POINTER else read(value))
        finally:
            it.close()

    def collect_garbage(self) -> dict[str, int]:
        """Delete value-log segments that no row points into any more, moving the few
        live values of mostly dead segments first."""
        get = self._db.get
        return self._vlog.collect(lambda key, pointer: get(key) == pointer, self._relocate)

    def _relocate(self, entries: list[tuple[bytes, bytes, bytes]]) -> int:
        # Under the write lock, so no write can come between the check and the put: a
        # key rewritten or deleted since the pointer was read keeps its newer state.
        with self._write_lock:
            get = self._db.get
            moved = [(key, value) for key, pointer, value in entries if get(key) == pointer]
            if moved:
                self._write_locked(moved, True, 0)  # min 0: every value back into the log
            return len(moved)

    def close(self) -> None:
        if not self._db.closed:
            with self._write_lock:
                self._vlog.close()
            self._db.close()
        if self._temporary:
            shutil.rmtree(self.path, ignore_errors=True)


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
        if name == "LOCK" or os.path.isdir(src):
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
