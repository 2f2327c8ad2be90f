"""A full disk: the reserve file and the writes-refused mode (docs/storage-api.md, "Full disk").

Without help a full disk wedges a store: every write fails, deleting a topic is a write
too, and LevelDB cannot even be opened again (it writes a new log, manifest and table at
open). So, as CockroachDB does with its ballast file, the store keeps ``<store>/reserve``,
a file of ``reserve_bytes`` that holds space back for the moment it is needed, and it
stops writing messages before the disk is full:

- Writes are refused once less than ``floor_bytes`` (the reserve's size) is free besides
  the reserve, or at once when a write fails with ENOSPC (something else filled the
  disk). Entering the mode deletes the reserve, so deletes, metadata writes, LevelDB's
  own background writes and a restart have room. Only publishes and stores are refused
  (the Store asks ``check_writable``); everything else goes on.
- Writes resume once ``resume_bytes`` (three reserves) is free: the reserve is made
  again and one reserve above the floor is left, so the mode does not flap.
- The reserve file's presence is the mode's durable state: a store opened without it
  (released before a crash) and with less than ``resume_bytes`` free starts refusing.

``reserve_bytes=None`` leaves any reserve file alone (inspection tools, tests, embedded
stores): no reserve is made and no floor applies, but a write failing with ENOSPC still
releases a reserve found there and refuses writes until ``MIN_RESUME_BYTES`` are free.
``0`` turns the reserve off and deletes a leftover one.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable

from .errors import DiskFull

log = logging.getLogger(__name__)

RESERVE_NAME = "reserve"
DEFAULT_RESERVE_BYTES = 64 << 20  # what `tmsgate serve` keeps unless told otherwise
# Without a managed reserve, writes resume at this much free space after an ENOSPC.
MIN_RESUME_BYTES = 16 << 20
# The writer looks at free space this often (a statvfs costs ~1 us) and on every write
# once free space is within NEAR_FLOOR floors of the floor: at a few hundred MB/s,
# 0.1 s is well inside one reserve.
CHECK_INTERVAL_S = 0.1
NEAR_FLOOR = 4
# While refused: how often a refused write (or any write) looks whether space came back.
REFUSED_LOOK_S = 1.0
_ENOSPC_TEXTS = ("No space left on device", "Disk quota exceeded")
_FILL_CHUNK = 1 << 20


def is_enospc(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) says the disk or a quota is full. LevelDB's
    errors carry no errno, only strerror's text."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(text in str(exc) for text in _ENOSPC_TEXTS):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def free_bytes_of(path: str) -> int:
    st = os.statvfs(path)
    # f_bavail, not f_bfree: what an unprivileged writer may still use (ext4 keeps 5% for
    # root). A gateway running as root could write a little further; refusing earlier is
    # the safe side.
    return st.f_bavail * st.f_frsize


class SpaceGuard:
    """The reserve file and the writes-refused flag of one store directory.

    ``refused`` is read without a lock (one attribute: every publish reads it);
    transitions happen under ``_lock`` from the writer thread, the janitor, or a refused
    publish looking whether space came back."""

    def __init__(
        self,
        directory: str,
        reserve_bytes: int | None,
        *,
        free_bytes: Callable[[str], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.managed = reserve_bytes is not None
        self.reserve_bytes = max(0, reserve_bytes or 0)
        self.reserve_path = os.path.join(directory, RESERVE_NAME)
        self.floor_bytes = self.reserve_bytes
        self.resume_bytes = max(3 * self.reserve_bytes, MIN_RESUME_BYTES)
        self.refused = False
        self.free_bytes = 0  # as last measured
        self.episodes = 0  # times the mode was entered (tests, logs)
        # Looked up per call unless given, so that tests can replace free_bytes_of.
        self._measure_free = free_bytes or (lambda path: free_bytes_of(path))
        self._clock = clock
        self._lock = threading.Lock()
        self._next_look = 0.0
        self._reserve_missing = False  # resumed, reserve not made again yet

    # --- opening ----------------------------------------------------------------------------
    def open(self) -> None:
        """Settle the reserve before the backend writes anything (LevelDB's open writes)."""
        if not self.managed:
            return
        with self._lock:
            held = self._reserve_size()
            if self.reserve_bytes == 0:
                if held:
                    self._release_locked()
                return
            self.measure()
            if held >= self.reserve_bytes:
                if held > self.reserve_bytes:  # made smaller since: give the rest back
                    with contextlib.suppress(OSError):
                        os.truncate(self.reserve_path, self.reserve_bytes)
                return
            # Missing (released before a crash or a stop, or never made) or partly made.
            if held:
                self._release_locked()
                self.measure()
            if self.free_bytes >= self.resume_bytes and self._create_locked():
                return
            self._refuse_locked(f"less than {self.resume_bytes >> 20} MiB free at start")

    # --- the writer's side ------------------------------------------------------------------
    def before_write(self) -> None:
        """Called before each backend write (the writer thread, under the write lock): looks
        at free space at a bounded rate, refusing below the floor, and remakes the reserve
        once writes were resumed."""
        now = self._clock()
        if now < self._next_look:
            return
        with self._lock:
            self.measure()
            if self.refused:
                self._maybe_resume_locked()
            elif self._reserve_missing:
                self._remake_locked()
            elif self.floor_bytes and self.free_bytes < self.floor_bytes:
                self._refuse_locked(f"less than {self.floor_bytes >> 20} MiB free")
            self._schedule_locked(now)

    def write_failed(self, cause: BaseException, what: str) -> DiskFull:
        """A write failed with ENOSPC: refuse writes (releasing the reserve) -> the error
        to raise."""
        with self._lock:
            self._refuse_locked(f"{what}: {cause}")
            return DiskFull(self.free_bytes, self.resume_bytes, f"{what}: {cause}")

    def release_for_open(self, cause: BaseException) -> bool:
        """LevelDB could not be opened for want of space: release the reserve, if there is
        one, so that it can. -> whether any space was released."""
        with self._lock:
            released = self._reserve_size() > 0
            self._refuse_locked(f"cannot open the store: {cause}")
            return released

    # --- the readers' side ------------------------------------------------------------------
    def check_writable(self) -> None:
        """Raise DiskFull while writes are refused. Cheap while they are not; while they
        are, looks at most once a second whether space came back (the reserve is then made
        again by the next write, not here: this may run on the event loop)."""
        if not self.refused:
            return
        if self._clock() >= self._next_look:
            with self._lock:
                if self.refused:
                    self.measure()
                    self._maybe_resume_locked(remake=False)  # the next write looks again
                    if self.refused:
                        self._schedule_locked(self._clock())
        if self.refused:
            raise DiskFull(self.free_bytes, self.resume_bytes)

    def look(self) -> bool:
        """Measure now and resume if space came back (the janitor, after freeing space).
        -> whether writes are still refused."""
        with self._lock:
            self.measure()
            if self.refused:
                self._maybe_resume_locked()
            elif self._reserve_missing:
                self._remake_locked()
            return self.refused

    def stats(self) -> dict[str, int]:
        """Figures for metrics, measured now."""
        try:
            free = self._measure_free(self.directory)
        except OSError:
            free = self.free_bytes
        return {
            "writes_refused": int(self.refused),
            "free_bytes": free,
            "reserve_bytes": self._reserve_size(),
            "resume_bytes": self.resume_bytes,
        }

    # --- internals (under _lock) ------------------------------------------------------------
    def measure(self) -> int:
        """Free bytes now (the last figure if statvfs fails)."""
        with contextlib.suppress(OSError):
            self.free_bytes = self._measure_free(self.directory)
        return self.free_bytes

    def _schedule_locked(self, now: float) -> None:
        if self.refused:
            self._next_look = now + REFUSED_LOOK_S
        elif self.floor_bytes and self.free_bytes < NEAR_FLOOR * self.floor_bytes:
            self._next_look = now  # close to the floor: every write looks
        else:
            self._next_look = now + CHECK_INTERVAL_S

    def _refuse_locked(self, reason: str) -> None:
        released = self._release_locked()
        self.measure()
        self._next_look = self._clock() + REFUSED_LOOK_S
        if self.refused:
            return
        self.refused = True
        self.episodes += 1
        log.warning(
            "disk full at %s (%s): writes are refused until space is free "
            "(%.1f MiB free, need %d MiB); reads and deletes go on%s",
            self.directory,
            reason,
            self.free_bytes / (1 << 20),
            self.resume_bytes >> 20,
            f"; released the {released >> 20} MiB reserve" if released else "",
        )

    def _maybe_resume_locked(self, remake: bool = True) -> None:
        if self.free_bytes < self.resume_bytes:
            return
        self.refused = False
        self._reserve_missing = self.managed and self.reserve_bytes > 0
        self._next_look = 0.0  # the next write looks again: it may be the one to fill it
        log.info(
            "space is free again at %s (%d MiB free): writes are accepted",
            self.directory,
            self.free_bytes >> 20,
        )
        if remake:
            self._remake_locked()

    def _remake_locked(self) -> None:
        if not self._create_locked():
            self._refuse_locked(f"cannot make the {self.reserve_bytes >> 20} MiB reserve again")

    def _reserve_size(self) -> int:
        try:
            return os.path.getsize(self.reserve_path)
        except OSError:
            return 0

    def _release_locked(self) -> int:
        held = self._reserve_size()
        for path in (self.reserve_path, self.reserve_path + ".tmp"):
            with contextlib.suppress(OSError):  # gone already; or kept, and said by stats()
                os.unlink(path)
        return held

    def _create_locked(self) -> bool:
        """Make the reserve (allocated, not sparse) under a temporary name, then rename it,
        so a crash never leaves a short reserve that looks complete. -> False if there is
        no room for it."""
        self._reserve_missing = False
        if not self.managed or self.reserve_bytes == 0:
            return True
        tmp = self.reserve_path + ".tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                _allocate(fd, self.reserve_bytes)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, self.reserve_path)
            _fsync_dir(self.directory)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if not is_enospc(exc):
                # Not for want of space (permissions, a read-only mount...): go on without
                # a reserve rather than refuse writes over it; said once, not retried.
                log.error("cannot make the disk reserve %s: %s", self.reserve_path, exc)
                return True
            self._reserve_missing = True
            return False
        self.measure()
        return True


def _allocate(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
    # No fallocate here: write the blocks (zeros; a compressing file system would keep
    # them small, which is the best such a file system allows).
    chunk = bytes(_FILL_CHUNK)
    done = 0
    while done < size:
        done += os.pwrite(fd, chunk[: min(_FILL_CHUNK, size - done)], done)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
