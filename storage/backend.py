"""The small ordered key-value interface every backend implements, and URL selection."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from .errors import StorageError

# A write is a list of (key, value) pairs; a value of None deletes the key.
Mutation = tuple[bytes, bytes | None]


class Backend(Protocol):
    def write(self, mutations: Sequence[Mutation], sync: bool = True) -> None:
        """Apply all mutations atomically; with sync, durable (fsync) before returning."""

    def get(self, key: bytes) -> bytes | None: ...

    def scan(
        self,
        start: bytes,
        stop: bytes,
        *,
        reverse: bool = False,
        include_start: bool = True,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Keys in [start, stop), ascending, or descending with reverse."""

    def collect_garbage(self) -> dict[str, int]:
        """Reclaim space the backend holds for deleted rows (the janitor calls this)."""

    def close(self) -> None: ...

    # A backend on a local disk also has ``space``, a ``space.SpaceGuard``: the Store asks
    # it whether publishes are refused for a full disk. Optional (getattr), so wrappers
    # and other backends need not have it.


def open_backend(
    url: str, snapshot: bool = False, disk_reserve_bytes: int | None = None
) -> Backend:
    """``leveldb:///abs/path`` or ``leveldb://./relative``; ``hbase://host:port`` later.

    With ``snapshot``, open a private point-in-time copy instead, so tools can look at a
    store that a running gateway holds locked. ``disk_reserve_bytes``: the reserve kept
    for a full disk (``space.py``); None leaves an existing reserve as it is."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise StorageError(f"store URL {url!r} has no scheme; try leveldb:///path/to/dir")
    if scheme == "leveldb":
        if not rest:
            raise StorageError(f"store URL {url!r} has no path")
        from .leveldb import LevelDBBackend, snapshot_copy

        if snapshot:
            return LevelDBBackend(snapshot_copy(rest), temporary=True)
        return LevelDBBackend(rest, disk_reserve_bytes=disk_reserve_bytes)
    if scheme == "hbase":
        raise StorageError(
            "the HBase backend is not part of this build; use leveldb:///path for now"
        )
    raise StorageError(f"unknown store URL scheme {scheme!r} in {url!r}; known: leveldb")
