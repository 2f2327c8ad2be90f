"""The small ordered key-value interface every backend implements, and engines by URL.

The contract is HBase's, the weakest backend the store runs on: **a row is written
atomically, and nothing more**. A write of several rows may land in part (a crash or an
error between rows) and in any order. Where the store needs an order (payloads before
the MessageTable row that makes them visible, a transaction's invalid mark before its
in-progress row goes) it hands the backend *phases*: every row of one phase is durable
before any row of the next is written. LevelDB, which writes a whole batch atomically,
may write all phases as one batch: atomic is stronger than ordered.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from .errors import StorageError

if TYPE_CHECKING:
    from .space import SpaceGuard

# A write is a list of (key, value) pairs; a value of None deletes the key.
Mutation = tuple[bytes, bytes | None]
# The row holding a Kafka offset under a MessageTable prefix: (key, value; None if the row
# went meanwhile), or None when no row starts at or below the offset (reader.py).
OffsetSearch = Callable[[bytes, int], "tuple[bytes, bytes | None] | None"]
# A scan with values as the engine holds them (scan's arguments, scan's rows).
StoredScan = Callable[..., Iterator[tuple[bytes, bytes]]]


class Backend(Protocol):
    # What an engine has beyond the calls every engine answers. Every engine states each
    # of these (None or False where it has not the feature), so the store reads them and
    # never probes for them.
    atomic_batches: bool
    """A write of many rows (phases too) lands whole or not at all (LevelDB, and served://
    whose owner writes a LevelDB batch), so the store's writer records no intents."""

    space: SpaceGuard | None
    """The guard of a local disk (space.py): the Store refuses publishes while it says the
    disk is full. None: no local disk (memory, hbase; served://, whose owner guards it)."""

    path: str | None
    """The directory the data lives in, on this machine (Kafka's DescribeLogDirs reports its
    disk; ``serve --workers`` keeps its run directory beside it). None: no local directory."""

    seek_offset: OffsetSearch | None
    """The engine's own search for the row holding an offset, where reader.py's search
    (a scan per probe) would cost more: hbase (one salt bucket, verified hints) and
    served:// (one call to the owner instead of one per probe). None: reader.py searches."""

    scan_stored: StoredScan | None
    """``scan`` with each value as the engine holds it (LevelDB: tagged, maybe a value-log
    pointer), which the owner of a served:// store answers so that a worker reads large
    values from the value log's files itself. None: the engine holds values as they are."""

    def write(self, mutations: Sequence[Mutation], sync: bool = True) -> None:
        """Apply the mutations, each row atomically, in no promised order; with sync,
        durable before returning. On an error, any subset of them may have landed."""

    def write_phases(self, phases: Sequence[Sequence[Mutation]], sync: bool = True) -> None:
        """Apply the phases in order: all of one phase is durable before any row of the
        next is written. On an error, a prefix of phases landed, then part of one."""

    def check_and_put(self, key: bytes, expected: bytes | None, value: bytes | None) -> bool:
        """Atomically: if the row's current value equals ``expected`` (None: the row is
        absent), write ``value`` (None: delete) and return True; else change nothing and
        return False. Durable before returning. On an error, the row may or may not have
        been written (as with ``write``).

        The one conditional write, for rows that several processes change (leases.py).
        The hbase engine has it only for metadata rows (keys not under ``M`` or ``P``),
        cannot delete with it (value None), and refuses empty values (HBase compares an
        empty cell equal to an absent one); its puts carry the region server's clock, so
        a key written with check_and_put must not be written with ``write`` as well
        (storage/hbase.py)."""

    def check_and_put_many(
        self, changes: Sequence[tuple[bytes, bytes | None, bytes | None]]
    ) -> list[bool]:
        """``check_and_put(key, expected, value)`` for each change, in order (a later
        change of the same key compares against what an earlier one wrote): whether each
        won. Each row's compare and write are atomic, as check_and_put's; the rows are
        not atomic together. All durable before returning, and where the engine can with
        one durable write for all (LevelDB: one batch, one fsync): a gateway renews the
        lease of every topic it leads at each tick, and a write each was an fsync each
        (2,000 topics over two ``--workers``: ~900 fsyncs a second, idle)."""

    def get(self, key: bytes) -> bytes | None: ...

    def scan(
        self,
        start: bytes,
        stop: bytes,
        *,
        reverse: bool = False,
        include_start: bool = True,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Keys in [start, stop), ascending, or descending with reverse. Each row as it
        was at some moment during the scan (no snapshot across rows is promised)."""

    def scan_keys(self, start: bytes, stop: bytes) -> Iterator[bytes]:
        """The keys in [start, stop), ascending, without their values: what a delete
        needs (the LevelDB engine then reads nothing from its value log)."""

    def scan_heads(
        self, start: bytes, stop: bytes, head: int
    ) -> Iterator[tuple[bytes, bytes, int]]:
        """The rows in [start, stop), ascending, each as (key, the first ``head`` bytes of
        its value, the value's length): what a survey of row sizes needs (the LevelDB
        engine reads only those bytes from its value log)."""

    def collect_garbage(self) -> dict[str, int]:
        """Reclaim space the backend holds for deleted rows (the janitor calls this)."""

    def sync_clock(self) -> None:
        """Order this process's later writes after every write any process sharing the
        store made so far, row by row. For engines whose cell versions come from each
        process's clock (hbase: a put stamped below an earlier one of another process is
        hidden by it); a no-op where one process owns the store or writes are ordered
        anyway. Called when a row's writer changes: a partition or the groups taken over
        (gateway/cluster.py)."""

    def close(self) -> None: ...


# An engine opens a backend from the rest of its URL (after ``scheme://``).
Opener = Callable[..., Backend]
# scheme -> (module, function, extra to install when the module's dependency is missing)
_ENGINES: dict[str, tuple[str, str, str | None]] = {
    "leveldb": ("tmsgate.storage.leveldb", "open_url", None),
    "memory": ("tmsgate.storage.memory", "open_url", None),
    "hbase": ("tmsgate.storage.hbase", "open_url", "hbase"),
    "served": ("tmsgate.storage.served", "open_url", None),
}


def register_engine(scheme: str, module: str, function: str, extra: str | None = None) -> None:
    """Make ``scheme://...`` open through ``module.function(rest, **options)``."""
    _ENGINES[scheme] = (module, function, extra)


def engines() -> list[str]:
    return sorted(_ENGINES)


def open_backend(
    url: str, snapshot: bool = False, disk_reserve_bytes: int | None = None
) -> Backend:
    """The backend a store URL names: ``leveldb:///abs/path`` or ``leveldb://./relative``,
    ``memory://name`` (in this process; faults on request, see memory.py) or
    ``hbase://host:port/prefix``.

    With ``snapshot``, open a private point-in-time copy instead, so tools can look at a
    store that a running gateway holds locked (engines that have no lock ignore it).
    ``disk_reserve_bytes``: the reserve kept for a full disk (``space.py``); None leaves
    an existing reserve as it is; engines without a local disk ignore it."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise StorageError(f"store URL {url!r} has no scheme; try leveldb:///path/to/dir")
    engine = _ENGINES.get(scheme)
    if engine is None:
        raise StorageError(
            f"unknown store URL scheme {scheme!r} in {url!r}; known: {', '.join(engines())}"
        )
    module_name, function, extra = engine
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if extra is None or not _missing_dependency(exc, module_name):
            raise
        raise StorageError(
            f"the {scheme} engine needs {exc.name or 'a package that is missing'}: "
            f"pip install 'tmsgate[{extra}]'"
        ) from exc
    opener: Opener = getattr(module, function)
    return opener(rest, snapshot=snapshot, disk_reserve_bytes=disk_reserve_bytes)


def _missing_dependency(exc: ImportError, module_name: str) -> bool:
    """A third-party package the engine imports is missing (not the engine itself)."""
    return exc.name is not None and not module_name.startswith(exc.name)


def write_each_phase(backend: Backend, phases: Sequence[Sequence[Mutation]], sync: bool) -> None:
    """write_phases for a backend without multi-row atomicity: one write per phase."""
    for phase in phases:
        if phase:
            backend.write(phase, sync=sync)
