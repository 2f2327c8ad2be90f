"""``memory://``: an ordered table in this process's memory, that can inject faults.

For tests and for trying tmsgate without a disk. It keeps exactly the backend contract
(backend.py) and no more, so that the store is tested against HBase's guarantees:

- rows live in a ``MemoryTable`` shared by every backend opened on the same name, so
  "restarting" is dropping a Store and opening another on the same name (what a crash
  leaves is what the table holds);
- a write is applied one row at a time, in a shuffled order within each phase;
- ``Faults`` can fail a write between two rows (``BackendError``; the backend goes on),
  or crash between two rows (``BackendCrashed``; this backend refuses every later call,
  as a dead process would, and the rows written so far stay). A ``check_and_put`` is one
  row: a fault comes before it or not at all, never half-way.

``memory://NAME?seed=7&fail_rate=0.01&crash_rate=0.001`` sets faults from the URL;
``memory://`` alone is a fresh private table. Nothing is on disk: a process exit loses
everything, so never point a gateway whose data matters at it.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from sortedcontainers import SortedDict

from .backend import Mutation
from .errors import BackendError

SCAN_CHUNK = 256  # rows copied out under the lock at a time


class BackendCrashed(BackendError):
    """The simulated process died between two rows; open a new backend to go on."""


class MemoryTable:
    """The rows every backend opened on one name shares: what survives a crash."""

    def __init__(self) -> None:
        self.rows: SortedDict = SortedDict()
        self.lock = threading.Lock()
        self.writes = 0  # rows written, for tests

    def put(self, key: bytes, value: bytes | None) -> None:
        with self.lock:
            if value is None:
                self.rows.pop(key, None)
            else:
                self.rows[key] = bytes(value)
            self.writes += 1

    def check_and_put(self, key: bytes, expected: bytes | None, value: bytes | None) -> bool:
        with self.lock:
            if self.rows.get(key) != expected:
                return False
            if value is None:
                self.rows.pop(key, None)
            else:
                self.rows[key] = bytes(value)
            self.writes += 1
            return True

    def get(self, key: bytes) -> bytes | None:
        with self.lock:
            return self.rows.get(key)

    def chunk(
        self, start: bytes, stop: bytes, reverse: bool, inclusive: bool
    ) -> list[tuple[bytes, bytes]]:
        """Up to SCAN_CHUNK rows of [start, stop) (or (start, stop) without ``inclusive``;
        for reverse, the bounds are still low, high, and ``inclusive`` is about ``stop``
        being excluded: never included)."""
        with self.lock:
            if reverse:
                keys = self.rows.irange(start, stop, inclusive=(inclusive, False), reverse=True)
            else:
                keys = self.rows.irange(start, stop, inclusive=(inclusive, False))
            out = []
            for key in keys:
                out.append((key, self.rows[key]))
                if len(out) >= SCAN_CHUNK:
                    break
            return out


_NAMED: dict[str, MemoryTable] = {}
_NAMED_LOCK = threading.Lock()


def table(name: str) -> MemoryTable:
    """The shared table of ``memory://name`` (created on first use)."""
    with _NAMED_LOCK:
        found = _NAMED.get(name)
        if found is None:
            found = _NAMED[name] = MemoryTable()
        return found


def drop(name: str) -> None:
    """Forget ``memory://name``'s rows (tests call this between cases)."""
    with _NAMED_LOCK:
        _NAMED.pop(name, None)


@dataclass
class Faults:
    """What goes wrong, decided by a seeded random generator so that a run repeats.

    Before each row of a write (the first one included) the backend may fail the write
    (``fail_rate``) or crash (``crash_rate``); ``crash_after_rows`` crashes
    deterministically once that many more rows were written, and ``fail_after_rows``
    fails the write in progress then (once; it is reset to None). A ``check_and_put``
    counts as one row written, whether or not its compare matched."""

    seed: int = 0
    fail_rate: float = 0.0
    crash_rate: float = 0.0
    crash_after_rows: int | None = None
    fail_after_rows: int | None = None
    shuffle: bool = True  # rows of one phase land in a random order, as HBase regions may
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)


class MemoryBackend:
    # Writes land row by row (faults may stop one part-way), values are kept as given,
    # and nothing is on a disk: none of the features backend.Backend lists.
    atomic_batches = False
    space = None
    path = None
    seek_offset = None
    scan_stored = None

    def __init__(self, shared: MemoryTable | None = None, faults: Faults | None = None) -> None:
        self.table = shared if shared is not None else MemoryTable()
        self.faults = faults
        self.crashed = False
        self.failures = 0  # faults injected (failed writes and the crash)

    # --- writing --------------------------------------------------------------------------
    def write(self, mutations: Sequence[Mutation], sync: bool = True) -> None:
        self._check_alive()
        rows = list(mutations)
        faults = self.faults
        if faults is not None and faults.shuffle and len(rows) > 1:
            # Keep the last mutation of each key last: a write that puts then deletes a
            # key means the delete (LevelDB's batch order), whatever order rows land in.
            last = {key: i for i, (key, _) in enumerate(rows)}
            rows = [rows[i] for i in sorted(last.values())]
            faults.rng.shuffle(rows)
        for key, value in rows:
            if faults is not None:
                self._maybe_fail(faults)
            self.table.put(key, value)
            if faults is not None:
                _count_row(faults)

    def check_and_put(self, key: bytes, expected: bytes | None, value: bytes | None) -> bool:
        """The compare and the write under the table's lock: one row, for faults too."""
        self._check_alive()
        faults = self.faults
        if faults is not None:
            self._maybe_fail(faults)
        done = self.table.check_and_put(key, expected, value)
        if faults is not None:
            _count_row(faults)
        return done

    def check_and_put_many(
        self, changes: Sequence[tuple[bytes, bytes | None, bytes | None]]
    ) -> list[bool]:
        """One check_and_put after another: each a row (and a fault point) of its own."""
        return [self.check_and_put(key, expected, value) for key, expected, value in changes]

    def write_phases(self, phases: Sequence[Sequence[Mutation]], sync: bool = True) -> None:
        for phase in phases:
            if phase:
                self.write(phase, sync)

    def _maybe_fail(self, faults: Faults) -> None:
        if faults.crash_after_rows is not None and faults.crash_after_rows <= 0:
            self._crash()
        if faults.fail_after_rows is not None and faults.fail_after_rows <= 0:
            faults.fail_after_rows = None
            self.failures += 1
            raise BackendError("injected fault: the write failed between two rows")
        roll = faults.rng.random()
        if roll < faults.crash_rate:
            self._crash()
        if roll < faults.crash_rate + faults.fail_rate:
            self.failures += 1
            raise BackendError("injected fault: the write failed between two rows")

    def _crash(self) -> None:
        self.crashed = True
        self.failures += 1
        raise BackendCrashed("injected fault: crashed between two rows")

    def _check_alive(self) -> None:
        if self.crashed:
            raise BackendCrashed("this backend crashed; open the store again")

    # --- reading --------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        self._check_alive()
        return self.table.get(key)

    def scan(
        self,
        start: bytes,
        stop: bytes,
        *,
        reverse: bool = False,
        include_start: bool = True,
    ) -> Iterator[tuple[bytes, bytes]]:
        self._check_alive()
        if reverse:
            # Reverse scans run from just below ``stop`` down to ``start``; include_start
            # is about ``start`` (as plyvel's iterator has it).
            high = stop
            while True:
                rows = self.table.chunk(start, high, True, include_start)
                yield from rows
                if len(rows) < SCAN_CHUNK:
                    return
                high = rows[-1][0]
                self._check_alive()
        low, inclusive = start, include_start
        while True:
            rows = self.table.chunk(low, stop, False, inclusive)
            yield from rows
            if len(rows) < SCAN_CHUNK:
                return
            low, inclusive = rows[-1][0], False
            self._check_alive()

    def scan_keys(self, start: bytes, stop: bytes) -> Iterator[bytes]:
        return (key for key, _ in self.scan(start, stop))

    def scan_heads(
        self, start: bytes, stop: bytes, head: int
    ) -> Iterator[tuple[bytes, bytes, int]]:
        return ((key, value[:head], len(value)) for key, value in self.scan(start, stop))

    def collect_garbage(self) -> dict[str, int]:
        return {}

    def sync_clock(self) -> None:
        pass  # rows carry no versions: the last write wins

    def close(self) -> None:
        pass


def _count_row(faults: Faults) -> None:
    if faults.crash_after_rows is not None:
        faults.crash_after_rows -= 1
    if faults.fail_after_rows is not None:
        faults.fail_after_rows -= 1


def open_url(
    rest: str, snapshot: bool = False, disk_reserve_bytes: int | None = None
) -> MemoryBackend:
    """``memory://`` + ``[name][?seed=N&fail_rate=F&crash_rate=F]``."""
    name, _, query = rest.partition("?")
    params = dict(parse_qsl(query, keep_blank_values=True))
    faults = None
    if params:
        unknown = set(params) - {"seed", "fail_rate", "crash_rate"}
        if unknown:
            raise BackendError(
                f"unknown memory:// option(s) {', '.join(sorted(unknown))}; "
                "known: seed, fail_rate, crash_rate"
            )
        try:
            faults = Faults(
                seed=int(params.get("seed", 0)),
                fail_rate=float(params.get("fail_rate", 0)),
                crash_rate=float(params.get("crash_rate", 0)),
            )
        except ValueError as exc:
            raise BackendError(f"bad memory:// option: {exc}") from exc
    return MemoryBackend(table(name) if name else None, faults)
