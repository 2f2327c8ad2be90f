"""A value log beside LevelDB: large values live in append-only segment files.

LevelDB rewrites every byte it holds several times as it compacts its levels, and with
many topics written at once (or small mutable rows such as producer state written next
to each topic's head) nearly every flushed file overlaps older ones, so 1 KiB Kafka
records were copied, checksummed and rewritten again and again. Following WiscKey, the
backend keeps only a small pointer in LevelDB and writes a large value once, here.

Layout: ``<store>/vlog/<id:016d>.vlog``, each segment a magic header followed by entries
``key_len(4) value_len(4) key value``; the key is kept so a segment's entries can be
checked against LevelDB (is this still the value the key points at?) when deciding
whether a segment is garbage. Segments are created at their full size (sparse) and read
through a read-only mmap each (a bounded number at once), so a read is a slice, not a
system call.

A value reaches disk before LevelDB's row that points at it: the writer appends and
fdatasyncs the segment, then writes LevelDB's batch (the commit point). A crash between
the two leaves an unreferenced tail, which is garbage, never a dangling pointer.
"""

from __future__ import annotations

import collections
import contextlib
import mmap
import os
import re
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .errors import BackendError
from .space import is_enospc

MAGIC = b"TMSVLOG1"
SEGMENT_BYTES = 64 << 20
ENTRY_HEAD = struct.Struct(">II")  # key length, value length
POINTER = struct.Struct(">BIII")  # tag, segment id, value position, value length
TAG_POINTER = 1
# What LevelDB holds for a value in the log: its pointer, then the value's first
# HEAD_BYTES bytes (a MessageTable row's head: flags, first offset, count), so that a scan
# of row heads and sizes (Backend.scan_heads: the compaction cleaner's survey) reads
# nothing from the log. Pointers written before are 13 bytes, without the head.
HEAD_BYTES = 13
STORED_POINTER = struct.Struct(f">BIII{HEAD_BYTES}s")
# A complete segment with less than this share of its bytes still live has its live
# values copied to the head of the log, so the segment can go: without this, one
# long-retention topic would keep every segment it shares with short-lived ones.
RELOCATE_BELOW = 0.5
# Entries checked against LevelDB per collection pass: ~0.1 s of the janitor thread, which
# holds the GIL meanwhile, so the event loop is not starved for long.
CENSUS_BUDGET = 50_000
RELOCATE_CHUNK = 512  # live values moved per LevelDB batch (the writer waits for each)
# Python's mmap keeps a duplicate of the file's descriptor, so mappings are limited: the
# oldest is unmapped when one more is needed (and mapped again when read again).
MAX_MAPPED = 256
# Written bytes kept in the page cache: older ranges are dropped once durable. Without a
# bound the cache grows by every byte written, and growing it is what costs: on this VM a
# page of fresh memory cost ~12 us to back (3 ms per MiB written) against ~0.4 ms per MiB
# when pages are recycled; on bare metal, growth evicts what readers actually use.
# Consumers that keep up read within the window; older reads fault in from the disk.
CACHE_WINDOW = 256 << 20
READ_AHEAD_FROM = 64 << 10  # a read of an old value this large asks for what follows it
# What the collector reads at a time while it walks a segment's heads (_walk_heads).
HEADS_MIN_READ = 4 << 10
HEADS_MAX_READ = 256 << 10
_DROP_STEP = 4 << 20  # drop in steps this large, so the writer pays one call per 4 MiB
_INLINE = b"\x00"  # the tag of a value kept in LevelDB itself
_IOV_MAX = 1024
_NAME = re.compile(r"^(\d{16})\.vlog$")


def _pread(path: str, at: int, length: int) -> bytes | None:
    """Bytes of a segment file read with the interpreter lock released: older values are
    mostly not in the page cache any more (CACHE_WINDOW), and a read through the mapping
    would wait for the disk in a page fault while holding the lock, stopping every thread
    (the compaction cleaner's reads of a topic's history took produce down to 0.4 of its
    rate). None if the file is gone (a retired segment: its mapping still has the bytes)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        value = os.pread(fd, length, at)
        if length >= READ_AHEAD_FROM:
            # Scans read values in the order they were written, which is their order in
            # the segment: start reading the next ones from the disk meanwhile.
            with contextlib.suppress(OSError):
                os.posix_fadvise(fd, at + length, 2 * length, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)
    return value if len(value) == length else None


def _walk_heads(fd: int, pos: int, end: int) -> Iterator[tuple[int, bytes, int, int]]:
    """The entries of a segment file from ``pos`` to ``end``, read with ``pread`` in
    chunks of heads: the collector's walk needs each entry's head and key, never its value.

    It used to walk a mapping of the segment, and each head's page fault read ~128 KiB
    around it (the kernel's read-around), with the interpreter lock held: for segments of
    produced batches (hundreds of KiB an entry) a pass read most of the log back from the
    disk (~800 MB a pass for a 1.2 GB log) while every other thread waited. Here the
    kernel reads only what is asked (POSIX_FADV_RANDOM), with the lock released. A chunk
    starts small (one head and key) and doubles while entries are small enough that the
    next head is already in it, so a log of small values is still read in long runs."""
    with contextlib.suppress(OSError):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    head, head_size = ENTRY_HEAD.unpack_from, ENTRY_HEAD.size
    buf, buf_at, size = b"", pos, HEADS_MIN_READ
    while pos + head_size <= end:
        off = pos - buf_at
        if off + head_size > len(buf):
            # A head straddling the chunk's end means small entries: read more at a time.
            # A value that went past the chunk means large ones: read the heads only.
            straddles = pos < buf_at + len(buf)
            size = min(size * 2, HEADS_MAX_READ) if straddles else HEADS_MIN_READ
            buf, buf_at, off = os.pread(fd, min(size, end - pos), pos), pos, 0
            if len(buf) < head_size:
                return
        key_len, value_len = head(buf, off)
        at = pos + head_size + key_len
        if key_len == 0 or at + value_len > end:
            return
        if off + head_size + key_len > len(buf):  # the key goes past the chunk's end
            want = max(min(size, end - pos), head_size + key_len)
            buf, buf_at, off = os.pread(fd, want, pos), pos, 0
            if len(buf) < head_size + key_len:
                return
        yield pos, buf[off + head_size : off + head_size + key_len], at, value_len
        pos = at + value_len


def _segment_name(seg_id: int) -> str:
    return f"{seg_id:016d}.vlog"


class _Segment:
    __slots__ = ("census", "end", "id", "map", "path", "scanned_to", "size")

    def __init__(self, seg_id: int, path: str, size: int) -> None:
        self.id = seg_id
        self.path = path
        self.size = size
        self.end: int | None = None  # where its data ends, once complete (see _data_end)
        self.map: mmap.mmap | None = None
        self.scanned_to = len(MAGIC)  # garbage collection: entries before this are dead
        self.census: tuple[int, int] | None = None  # a count in progress: (position, live)


class ValueLog:
    """Appends happen on one thread at a time (the backend's write lock); reads anywhere."""

    def __init__(
        self,
        directory: str,
        segment_bytes: int = SEGMENT_BYTES,
        cache_window: int | None = None,
    ) -> None:
        self.directory = directory
        self._segment_bytes = segment_bytes
        os.makedirs(directory, exist_ok=True)
        self._segments: dict[int, _Segment] = {}
        for name in os.listdir(directory):
            m = _NAME.match(name)
            if m:
                path = os.path.join(directory, name)
                size = os.path.getsize(path)
                if size >= len(MAGIC):
                    self._segments[int(m.group(1))] = _Segment(int(m.group(1)), path, size)
                else:
                    os.unlink(path)  # created but never written: nothing can point at it
        # Segments deleted by the last collection, still mapped: a scan that began before
        # their rows were deleted may yet follow a pointer into one.
        self._retired: dict[int, _Segment] = {}
        self._census_after = 0  # the segment whose live bytes were counted last
        self._mapped: collections.deque[_Segment] = collections.deque()  # oldest first
        self._lock = threading.Lock()  # guards the segment table against the collector
        self._fd = self._dsync_fd = -1
        self._active: _Segment | None = None
        self._pos = 0  # where the next entry goes in the active segment
        self._pending: list[bytes] = []  # entries appended since the last write
        self._pending_bytes = 0
        self._dirty: set[int] = set()  # descriptors written since the last fdatasync
        self._sealed: list[int] = []  # descriptors of segments no longer appended to
        self._dirty_since_flush = False  # stage() wrote part of its entries already
        self._must_roll = False  # a write failed: the next one starts a new segment
        self._cache_window = CACHE_WINDOW if cache_window is None else cache_window
        # [segment, first cached byte, end of written bytes] of each segment with written
        # bytes still in the page cache, oldest first; their total is _cached_bytes.
        self._cached: collections.deque[list[Any]] = collections.deque()
        self._cached_bytes = 0
        # Every segment below this id is complete: each write that put entries there has
        # also written LevelDB's rows, so its liveness can be judged from LevelDB alone.
        self.complete_below = max(self._segments, default=0) + 1
        self._next_id = self.complete_below  # the id of the next segment opened
        try:
            self._open_segment(self.complete_below, self._segment_bytes)
        except OSError as exc:
            if not is_enospc(exc):
                raise
            # A full disk: reads need no segment to append to, and neither do deletes; the
            # first value written opens one (or fails, as any write would).
            self._must_roll = True

    # -- writing (one thread at a time: the backend's write lock) --------------------------

    def _open_segment(self, seg_id: int, size: int) -> None:
        path = os.path.join(self.directory, _segment_name(seg_id))
        fd = dsync_fd = -1
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            dsync_fd = os.open(path, os.O_WRONLY | os.O_DSYNC)
            os.ftruncate(fd, size)
            os.pwrite(fd, MAGIC, 0)
            os.fdatasync(fd)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the new name must survive a crash with the data in it
            finally:
                os.close(dir_fd)
        except OSError:
            for d in (fd, dsync_fd):
                if d >= 0:
                    os.close(d)
            if fd >= 0:  # ours (O_EXCL): leave no half-made segment to collide with
                with contextlib.suppress(OSError):
                    os.unlink(path)
            raise
        if self._fd >= 0:
            self._sealed.append(self._fd)
            self._sealed.append(self._dsync_fd)
        seg = _Segment(seg_id, path, size)
        with self._lock:
            self._segments[seg_id] = seg
        self._fd, self._dsync_fd, self._active, self._pos = fd, dsync_fd, seg, len(MAGIC)
        self._next_id = seg_id + 1
        self._must_roll = False
        self._cached.append([seg, 0, len(MAGIC)])
        self._cached_bytes += len(MAGIC)

    def stage(
        self,
        mutations: Sequence[tuple[bytes, bytes | None]],
        put: Callable[[bytes, bytes], None],
        delete: Callable[[bytes], None],
        min_bytes: int,
    ) -> bool:
        """Hand each mutation to ``put``/``delete`` as LevelDB will hold it: a value shorter
        than ``min_bytes`` inline behind a zero tag byte, a longer one appended here with
        its pointer put instead. -> whether anything was appended (``flush`` before the
        LevelDB batch is written). One loop, few calls: it runs once per message."""
        active = self._active
        if active is not None and not self._must_roll:
            seg_id, limit, pos = active.id, active.size, self._pos
        else:
            # Nothing to append to (a failed write, a sealed segment, none made at open):
            # the first value to append opens a segment through the "full" branch below,
            # so a batch of deletes and small values needs none (on a full disk, that is
            # what lets a topic be deleted).
            seg_id, limit, pos = self._next_id - 1, -1, self._pos
        parts = self._pending
        head, pointer, inline = ENTRY_HEAD.pack, STORED_POINTER.pack, _INLINE.__add__
        start = pos
        for key, value in mutations:
            if value is None:
                delete(key)
                continue
            n = len(value)
            if n < min_bytes:
                put(key, inline(value))
                continue
            kn = len(key)
            need = 8 + kn + n
            if pos + need > limit:
                self._pos, self._pending_bytes = pos, self._pending_bytes + pos - start
                try:
                    if parts:
                        self._write_pending()
                        self._dirty_since_flush = True
                    # A value larger than a segment gets a segment of its own size.
                    size = max(self._segment_bytes, need + len(MAGIC))
                    self._open_segment(seg_id + 1, size)
                except OSError as exc:
                    self.discard()
                    raise BackendError(f"value log write failed: {exc}") from exc
                assert self._active is not None
                seg_id, limit, pos = self._active.id, self._active.size, self._pos
                start, parts = pos, self._pending
            parts += (head(kn, n), key, value)
            put(key, pointer(TAG_POINTER, seg_id, pos + 8 + kn, n, value))
            pos += need
        self._pending_bytes += pos - start
        self._pos = pos
        return self._dirty_since_flush or bool(parts)

    def _write_pending(self, durable: bool = False) -> None:
        """Write the queued entries; ``durable``: through the O_DSYNC descriptor, so the
        one system call that writes them also makes them durable."""
        if not self._pending:
            return
        parts = self._pending
        at = self._pos - self._pending_bytes
        self._pending = []
        self._pending_bytes = 0
        fd = self._dsync_fd if durable else self._fd
        # pwritev without joining: the kernel copies straight from each value.
        for i in range(0, len(parts), _IOV_MAX):
            chunk = parts[i : i + _IOV_MAX]
            size = sum(map(len, chunk))
            done = os.pwritev(fd, chunk, at)
            if done < size:  # short write (rare): finish it from a joined copy
                rest = memoryview(b"".join(chunk))[done:]
                while rest:
                    n = os.pwrite(fd, rest, at + done)
                    rest, done = rest[n:], done + n
            at += size
        self._cached_bytes += at - self._cached[-1][2]
        self._cached[-1][2] = at
        if not durable:
            self._dirty.add(fd)

    def flush(self, sync: bool) -> None:
        """Everything appended is written (with ``sync``, on disk) when this returns."""
        try:
            if sync and not self._dirty and len(self._pending) <= _IOV_MAX:
                # A small commit (a message at a time, at low rates): one O_DSYNC write
                # instead of a write and an fdatasync, each of which would wait for the
                # GIL again on its way back while the event loop is busy.
                self._write_pending(durable=True)
            self._write_pending()
            self._dirty_since_flush = False
            if sync:
                for fd in self._dirty:
                    os.fdatasync(fd)
                self._dirty.clear()
        except OSError as exc:
            self.discard()
            raise BackendError(f"value log write failed: {exc}") from exc
        for fd in [fd for fd in self._sealed if fd not in self._dirty]:
            os.close(fd)
            self._sealed.remove(fd)
        if sync and self._cached_bytes > self._cache_window + _DROP_STEP:
            self._drop_cached()

    def _drop_cached(self) -> None:
        """Drop the oldest durable bytes from the page cache, keeping the newest
        ``cache_window``. Page-aligned, so a partly dropped page is kept until the rest
        of it goes too."""
        excess = self._cached_bytes - self._cache_window
        while excess > 0 and self._cached:
            entry = self._cached[0]
            seg, start, end = entry
            whole = seg is not self._active and start + excess >= end
            upto = end if whole else (min(end, start + excess) // mmap.PAGESIZE) * mmap.PAGESIZE
            if upto <= start:
                return
            self._drop_range(seg, start, upto)
            self._cached_bytes -= upto - start
            excess -= upto - start
            if whole:
                self._cached.popleft()
            else:
                entry[1] = upto

    def _drop_range(self, seg: _Segment, start: int, end: int) -> None:
        # Pages mapped by a reader are not dropped by fadvise: unmap them from our own
        # mapping first (a later read faults them in again, from the cache or the disk).
        m = seg.map
        if m is not None:
            aligned = start - start % mmap.PAGESIZE
            with contextlib.suppress(ValueError, OSError):  # unmapped meanwhile
                m.madvise(mmap.MADV_DONTNEED, aligned, end - aligned)
        if seg is self._active:
            with contextlib.suppress(OSError):  # caching is advice: never fail a write
                os.posix_fadvise(self._fd, start, end - start, os.POSIX_FADV_DONTNEED)
            return
        try:
            fd = os.open(seg.path, os.O_RDONLY)
        except OSError:
            return  # collected meanwhile: nothing of it is cached any more
        try:
            with contextlib.suppress(OSError):
                os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    def discard(self) -> None:
        """A write failed: nothing LevelDB holds points past the last durable write, and
        after a failed write or fsync the segment's tail is unknown (perhaps a hole of
        zeros, which would end a collector's walk early). So no entry is ever appended
        after it: the next write starts a new segment first, or fails if it cannot."""
        self._pending = []
        self._pending_bytes = 0
        self._dirty_since_flush = False
        self._dirty.clear()  # unsynced entries are garbage now; no need to sync them
        self._must_roll = True

    def written(self) -> None:
        """LevelDB's batch is written: every segment but the active one is complete."""
        self.complete_below = self._active.id if self._active is not None else self._next_id

    def seal(self) -> bool:
        """Stop appending to the active segment, so that the collector may delete it once
        no row points into it; the next value written opens a new one. While writes are
        refused for a full disk this is how the segment being written gives its space back
        (it would otherwise be kept until 64 MiB more were written). Between writes only
        (the backend's write lock). -> whether a segment was sealed."""
        seg = self._active
        if seg is None or self._pending or self._pos <= len(MAGIC):
            return False
        for fd in self._dirty:
            os.fdatasync(fd)
        self._dirty.clear()
        # Not truncated: readers map the segment at its full size, and the unwritten rest
        # is a hole that takes no space (the collector finds where data ends: _data_end).
        for fd in (self._fd, self._dsync_fd, *self._sealed):
            os.close(fd)
        self._sealed.clear()
        self._fd = self._dsync_fd = -1
        self._active = None
        self._must_roll = True
        self.complete_below = self._next_id
        return True

    # -- reading ---------------------------------------------------------------------------

    def read(self, pointer: bytes, limit: int | None = None) -> bytes:
        """The value ``pointer`` names (with ``limit``, its first ``limit`` bytes)."""
        _, seg_id, at, length = POINTER.unpack_from(pointer)
        if limit is not None:
            length = min(length, limit)
        seg = self._segments.get(seg_id) or self._retired.get(seg_id)
        if seg is None:
            raise BackendError(f"value log segment {seg_id} is missing from {self.directory}")
        if not self._recent(seg, at):
            value = _pread(seg.path, at, length)
            if value is not None:
                return value
        for _ in range(3):
            try:
                return self._view(seg)[at : at + length]
            except ValueError:  # unmapped by another thread meanwhile: map it again
                continue
            except OSError as exc:  # collected while a very old scan still ran
                raise BackendError(f"value log segment {seg_id} was collected: {exc}") from exc
        raise BackendError(f"value log segment {seg_id} could not be mapped")

    def _recent(self, seg: _Segment, at: int) -> bool:
        """Whether ``at`` is within the newest ``cache_window`` bytes written (still in the
        page cache unless the kernel needed the memory)."""
        try:
            oldest = self._cached[0]
        except IndexError:
            return False
        return (seg.id, at) >= (oldest[0].id, oldest[1])

    def _view(self, seg: _Segment) -> mmap.mmap:
        m = seg.map
        if m is not None:
            return m
        with self._lock:
            if seg.map is None:
                with open(seg.path, "rb") as f:
                    seg.map = mmap.mmap(f.fileno(), seg.size, access=mmap.ACCESS_READ)
                self._mapped.append(seg)
                while len(self._mapped) > MAX_MAPPED:
                    old = self._mapped.popleft()
                    # A retired segment's file is gone: its map stays until the next pass.
                    if old.map is not None and old.id not in self._retired:
                        old.map.close()
                        old.map = None
            return seg.map

    # -- garbage collection ----------------------------------------------------------------

    def collect(
        self,
        is_live: Callable[[bytes, bytes], bool],
        relocate: Callable[[list[tuple[bytes, bytes, bytes]]], int] | None = None,
        relocate_budget: int | None = None,
    ) -> dict[str, int]:
        """Delete complete segments that no LevelDB row points into; with ``relocate``,
        first move the live values out of segments that are mostly dead.

        ``is_live(key, pointer)`` says whether LevelDB still holds that pointer (perhaps with
        the value's head after it) for that key. A dead entry never becomes live again (new
        values always go to the active segment), so each segment is examined only from its
        first live entry on.
        Counting a segment's live bytes takes a LevelDB read per entry, so it goes on
        across passes within CENSUS_BUDGET entries per pass, oldest segments first.
        ``relocate([(key, pointer, value), ...])`` puts each value again (at the head of
        the log) if its key still holds that pointer, atomically with other writes;
        ``relocate_budget`` bounds the live bytes moved in this pass (on a full disk,
        moving takes the space that deleting the segment then gives back).
        """
        # Mappings of segments deleted by the previous pass go now: a scan that began
        # before that pass may have held a pointer into them until then.
        with self._lock:
            for seg in self._retired.values():
                if seg.map is not None:
                    seg.map.close()
                    seg.map = None
            self._retired = {}
        stats = {"vlog_segments_deleted": 0, "vlog_bytes_freed": 0, "vlog_values_relocated": 0}
        with self._lock:
            candidates = sorted(s for s in self._segments if s < self.complete_below)
        live = [seg_id for seg_id in candidates if not self._delete_if_dead(seg_id, is_live, stats)]
        if relocate is None or not live:
            return stats
        # Counting resumes after the segment counted last, so old segments that stay
        # live (a topic kept forever) do not starve the younger ones of the budget.
        cut = next((i for i, seg_id in enumerate(live) if seg_id > self._census_after), 0)
        budget = CENSUS_BUDGET
        for seg_id in live[cut:] + live[:cut]:
            if budget <= 0:
                break
            seg = self._segments[seg_id]
            live_bytes, used, budget = self._count_live(seg, is_live, budget)
            self._uncache_old(seg)  # the count read it back in
            # An unfinished count is where the next pass resumes.
            self._census_after = seg_id if seg.census is None else seg_id - 1
            if used and live_bytes < RELOCATE_BELOW * used:
                if relocate_budget is not None:
                    if live_bytes > relocate_budget:
                        continue
                    relocate_budget -= live_bytes
                stats["vlog_values_relocated"] += self._relocate(seg, is_live, relocate)
                self._delete_if_dead(seg_id, is_live, stats)
        return stats

    def _uncache_old(self, seg: _Segment) -> None:
        """Drop what the collector read of a segment older than the page-cache window,
        so that counting long-lived segments does not bring the whole log back in."""
        try:
            oldest_cached = self._cached[0][0].id
        except IndexError:
            return
        if seg.id < oldest_cached:
            self._drop_range(seg, 0, seg.size)

    def _delete_if_dead(
        self, seg_id: int, is_live: Callable[[bytes, bytes], bool], stats: dict[str, int]
    ) -> bool:
        seg = self._segments[seg_id]
        if self._first_live(seg, is_live):
            return False
        # Mapped before the file goes: a scan that began before the rows pointing here
        # were deleted may yet follow one of its pointers, and reads the mapping then.
        with contextlib.suppress(OSError, ValueError):
            self._view(seg)
        with self._lock:  # retired first: a read finds it in one table or the other
            self._retired[seg_id] = seg
            del self._segments[seg_id]
        os.unlink(seg.path)
        stats["vlog_segments_deleted"] += 1
        stats["vlog_bytes_freed"] += seg.size
        return True

    def _entries(self, seg: _Segment, pos: int) -> Iterator[tuple[int, bytes, int, int]]:
        """(entry position, key, value position, value length) of each entry from ``pos``
        on, up to the never-written (zero) or torn rest of the segment."""
        try:
            fd = os.open(seg.path, os.O_RDONLY)
        except OSError:
            return  # deleted by an earlier pass: nothing left to walk
        try:
            yield from _walk_heads(fd, pos, self._data_end(seg))
        finally:
            os.close(fd)

    @staticmethod
    def _data_end(seg: _Segment) -> int:
        """Where a complete segment's data ends: its first hole (segments are created
        sparse; one left by a crash or a failed write keeps its unwritten rest). The walk
        stops there instead of reading the hole: on tmpfs, reading a hole through a mapping
        allocates a page, and on a full tmpfs that is a SIGBUS, which kills the process."""
        if seg.end is None:
            end = seg.size
            with contextlib.suppress(OSError):  # no SEEK_HOLE here: the file is all data
                fd = os.open(seg.path, os.O_RDONLY)
                try:
                    end = min(end, os.lseek(fd, 0, os.SEEK_HOLE))
                finally:
                    os.close(fd)
            seg.end = end
        return seg.end

    def _first_live(self, seg: _Segment, is_live: Callable[[bytes, bytes], bool]) -> bool:
        end = seg.scanned_to
        for pos, key, at, n in self._entries(seg, seg.scanned_to):
            if is_live(key, POINTER.pack(TAG_POINTER, seg.id, at, n)):
                seg.scanned_to = pos
                return True
            end = at + n
        seg.scanned_to = end
        return False

    def _count_live(
        self, seg: _Segment, is_live: Callable[[bytes, bytes], bool], budget: int
    ) -> tuple[int, int, int]:
        """-> (live bytes, bytes the segment's entries take, budget left); used is 0 while
        the count is unfinished (it resumes in the next pass)."""
        pos, live = seg.census or (seg.scanned_to, 0)
        end = pos
        for entry, key, at, n in self._entries(seg, pos):
            if budget <= 0:
                seg.census = (entry, live)
                return 0, 0, 0
            budget -= 1
            if is_live(key, POINTER.pack(TAG_POINTER, seg.id, at, n)):
                live += at + n - entry
            end = at + n
        seg.census = None  # finished: the next pass counts afresh (values only die)
        return live, end - len(MAGIC), budget

    def _relocate(
        self,
        seg: _Segment,
        is_live: Callable[[bytes, bytes], bool],
        relocate: Callable[[list[tuple[bytes, bytes, bytes]]], int],
    ) -> int:
        moved, chunk = 0, []
        for _, key, at, n in self._entries(seg, seg.scanned_to):
            pointer = POINTER.pack(TAG_POINTER, seg.id, at, n)
            if is_live(key, pointer):
                # Read with the interpreter lock free: the segment is old, and a page
                # fault in a mapping would wait for the disk holding it.
                value = _pread(seg.path, at, n)
                if value is None:
                    raise BackendError(f"value log segment {seg.id} is shorter than its entries")
                chunk.append((key, pointer, value))
                if len(chunk) >= RELOCATE_CHUNK:
                    moved += relocate(chunk)
                    chunk = []
        if chunk:
            moved += relocate(chunk)
        return moved

    def stats(self) -> dict[str, int]:
        with self._lock:
            segs = list(self._segments.values())
        return {"segments": len(segs), "bytes": sum(s.size for s in segs)}

    def close(self) -> None:
        for fd in self._sealed:
            os.close(fd)
        self._sealed.clear()
        self._dirty.clear()
        if self._fd >= 0:
            assert self._active is not None
            try:
                os.ftruncate(self._fd, self._pos)  # give back the never-written rest
                self._active.size = self._pos
            finally:
                os.close(self._fd)
                os.close(self._dsync_fd)
                self._fd = self._dsync_fd = -1
        for seg in [*self._segments.values(), *self._retired.values()]:
            if seg.map is not None:
                seg.map.close()
                seg.map = None
