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
through one read-only mmap each, so a read is a slice, not a system call.

A value reaches disk before LevelDB's row that points at it: the writer appends and
fdatasyncs the segment, then writes LevelDB's batch (the commit point). A crash between
the two leaves an unreferenced tail, which is garbage, never a dangling pointer.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import struct
import threading
from collections.abc import Callable, Sequence

from .errors import BackendError

MAGIC = b"TMSVLOG1"
SEGMENT_BYTES = 64 << 20
ENTRY_HEAD = struct.Struct(">II")  # key length, value length
POINTER = struct.Struct(">BIII")  # tag, segment id, value position, value length
TAG_POINTER = 1
_INLINE = b"\x00"  # the tag of a value kept in LevelDB itself
_IOV_MAX = 1024
_NAME = re.compile(r"^(\d{16})\.vlog$")


def _segment_name(seg_id: int) -> str:
    return f"{seg_id:016d}.vlog"


class _Segment:
    __slots__ = ("id", "map", "path", "scanned_to", "size")

    def __init__(self, seg_id: int, path: str, size: int) -> None:
        self.id = seg_id
        self.path = path
        self.size = size
        self.map: mmap.mmap | None = None
        self.scanned_to = len(MAGIC)  # garbage collection: entries before this are dead

    def view(self) -> mmap.mmap:
        if self.map is None:
            with open(self.path, "rb") as f:
                self.map = mmap.mmap(f.fileno(), self.size, access=mmap.ACCESS_READ)
        return self.map


class ValueLog:
    """Appends happen on one thread at a time (the backend's write lock); reads anywhere."""

    def __init__(self, directory: str, segment_bytes: int = SEGMENT_BYTES) -> None:
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
        self._lock = threading.Lock()  # guards the segment table against the collector
        self._fd = self._dsync_fd = -1
        self._active: _Segment | None = None
        self._pos = 0  # where the next entry goes in the active segment
        self._pending: list[bytes] = []  # entries appended since the last write
        self._pending_bytes = 0
        self._dirty: set[int] = set()  # descriptors written since the last fdatasync
        self._sealed: list[int] = []  # descriptors of segments no longer appended to
        self._dirty_since_flush = False  # stage() wrote part of its entries already
        # Every segment below this id is complete: each write that put entries there has
        # also written LevelDB's rows, so its liveness can be judged from LevelDB alone.
        self.complete_below = max(self._segments, default=0) + 1
        self._open_segment(self.complete_below, self._segment_bytes)

    # -- writing (one thread at a time: the backend's write lock) --------------------------

    def _open_segment(self, seg_id: int, size: int) -> None:
        path = os.path.join(self.directory, _segment_name(seg_id))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, size)
            os.pwrite(fd, MAGIC, 0)
            os.fdatasync(fd)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the new name must survive a crash with the data in it
            finally:
                os.close(dir_fd)
        except OSError:
            os.close(fd)
            os.unlink(path)
            raise
        try:
            dsync_fd = os.open(path, os.O_WRONLY | os.O_DSYNC)
        except OSError:
            os.close(fd)
            raise
        if self._fd >= 0:
            self._sealed.append(self._fd)
            self._sealed.append(self._dsync_fd)
        seg = _Segment(seg_id, path, size)
        with self._lock:
            self._segments[seg_id] = seg
        self._fd, self._dsync_fd, self._active, self._pos = fd, dsync_fd, seg, len(MAGIC)

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
        assert self._active is not None
        seg_id, limit, pos = self._active.id, self._active.size, self._pos
        parts = self._pending
        head, pointer, inline = ENTRY_HEAD.pack, POINTER.pack, _INLINE.__add__
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
                self._write_pending()
                self._dirty_since_flush = True
                # A value larger than a segment gets a segment of its own size.
                self._open_segment(seg_id + 1, max(self._segment_bytes, need + len(MAGIC)))
                assert self._active is not None
                seg_id, limit, pos = self._active.id, self._active.size, self._pos
                start, parts = pos, self._pending
            parts += (head(kn, n), key, value)
            put(key, pointer(TAG_POINTER, seg_id, pos + 8 + kn, n))
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

    def discard(self) -> None:
        """A write failed: after a failed write or fsync a segment's tail is unknown, so
        appending goes on in a new segment. Nothing in LevelDB points at the old tail."""
        self._pending.clear()
        self._pending_bytes = 0
        assert self._active is not None
        self._dirty_since_flush = False
        with contextlib.suppress(OSError):  # a failing disk: the next write tries again
            self._open_segment(self._active.id + 1, self._segment_bytes)
        for fd in self._sealed:
            os.close(fd)
            self._dirty.discard(fd)
        self._sealed.clear()

    def written(self) -> None:
        """LevelDB's batch is written: every segment but the active one is complete."""
        assert self._active is not None
        self.complete_below = self._active.id

    # -- reading ---------------------------------------------------------------------------

    def read(self, pointer: bytes) -> bytes:
        _, seg_id, at, length = POINTER.unpack(pointer)
        seg = self._segments.get(seg_id) or self._retired.get(seg_id)
        if seg is None:
            raise BackendError(f"value log segment {seg_id} is missing from {self.directory}")
        try:
            return seg.view()[at : at + length]
        except (ValueError, OSError) as exc:  # collected while a very old scan still ran
            raise BackendError(f"value log segment {seg_id} was collected: {exc}") from exc

    # -- garbage collection ----------------------------------------------------------------

    def collect(self, is_live: Callable[[bytes, bytes], bool]) -> tuple[int, int]:
        """Delete complete segments that no LevelDB row points into.

        ``is_live(key, pointer)`` says whether LevelDB still holds that pointer for that
        key. A dead entry never becomes live again (new values always go to the active
        segment), so each segment is examined only from its first live entry on, and a
        pass costs what was expired since the last one. -> (segments deleted, bytes).
        """
        # Mappings of segments deleted by the previous pass go now: a scan that began
        # before that pass may have held a pointer into them until then.
        for seg in self._retired.values():
            if seg.map is not None:
                seg.map.close()
        self._retired = {}
        deleted = freed = 0
        with self._lock:
            candidates = sorted(s for s in self._segments if s < self.complete_below)
        for seg_id in candidates:
            seg = self._segments[seg_id]
            if self._first_live(seg, is_live):
                continue
            with self._lock:
                del self._segments[seg_id]
            os.unlink(seg.path)
            self._retired[seg_id] = seg
            deleted += 1
            freed += seg.size
        return deleted, freed

    def _first_live(self, seg: _Segment, is_live: Callable[[bytes, bytes], bool]) -> bool:
        view = seg.view()
        head, head_size = ENTRY_HEAD.unpack_from, ENTRY_HEAD.size
        pos = seg.scanned_to
        while pos + head_size <= seg.size:
            key_len, value_len = head(view, pos)
            if key_len == 0:
                break  # the zero-filled, never-written rest of the segment
            at = pos + head_size + key_len
            key = view[pos + head_size : at]
            if is_live(key, POINTER.pack(TAG_POINTER, seg.id, at, value_len)):
                seg.scanned_to = pos
                return True
            pos = at + value_len
        seg.scanned_to = pos
        return False

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
