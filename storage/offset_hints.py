"""The HBase engine's offset search hints (hbase.py ``seek_offset``): MessageTable rows
seen by earlier searches, remembered per key prefix (a topic generation) as hints, never
as facts. Pure data, no Thrift and no I/O: tested alone (tests/test_hbase_engine.py)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import NamedTuple

from sortedcontainers import SortedDict

from . import keys

# Rows remembered per MessageTable prefix, and prefixes (topic generations) remembered at
# once, the least recently used going first. A row takes about 220 bytes: at most ~30 MB.
HINTS_PER_PREFIX = 512
HINT_PREFIXES = 256


class HeadRow(NamedTuple):
    """A MessageTable row as the offset search sees it: its store key and ``d:o``."""

    key: bytes
    base: int
    count: int


def holds(value: bytes | None, row: HeadRow) -> bool:
    """Whether ``value`` is a row with ``row``'s base offset and count."""
    if value is None or len(value) < keys.ROW_HEAD.size:
        return False
    return keys.ROW_HEAD.unpack_from(value)[1:] == (row.base, row.count)


class OffsetHints:
    """MessageTable rows seen by seek_offset, per key prefix (topic generation): base
    offset -> (key, count), sparse and bounded. Hints only (seek_offset verifies them).

    A prefix keeps at most ``per_prefix`` rows, and at most ``prefixes`` prefixes are
    kept; the least recently noted row (or prefix) goes first. seek_offset notes again
    the hints it uses, so an offset named again and again (a log start, a group's
    committed offset) stays a hint."""

    def __init__(self, per_prefix: int = HINTS_PER_PREFIX, prefixes: int = HINT_PREFIXES):
        self._per_prefix = per_prefix
        self._prefixes = prefixes
        self._lock = threading.Lock()
        # prefix -> (base -> (key, count), and the bases from least to most recently noted)
        self._rows: dict[bytes, tuple[SortedDict, dict[int, None]]] = {}

    def _prefix(self, prefix: bytes, create: bool) -> tuple[SortedDict, dict[int, None]] | None:
        """The prefix's rows, made the most recently used (the caller holds the lock)."""
        known = self._rows.pop(prefix, None)
        if known is None:
            if not create:
                return None
            while len(self._rows) >= self._prefixes:
                del self._rows[next(iter(self._rows))]  # the least recently used
            known = (SortedDict(), {})
        self._rows[prefix] = known
        return known

    def note(self, prefix: bytes, rows: Sequence[HeadRow]) -> None:
        if not rows:
            return
        with self._lock:
            known = self._prefix(prefix, create=True)
            assert known is not None
            by_base, recency = known
            for row in rows:
                by_base[row.base] = (row.key, row.count)
                recency.pop(row.base, None)
                recency[row.base] = None
            while len(recency) > self._per_prefix:
                oldest = next(iter(recency))
                del recency[oldest], by_base[oldest]

    def bracket(self, prefix: bytes, offset: int) -> tuple[HeadRow | None, HeadRow | None]:
        """The remembered rows nearest ``offset``: the last starting at or below it, and
        the first starting above it."""
        with self._lock:
            known = self._prefix(prefix, create=False)
            if known is None:
                return None, None
            by_base = known[0]
            i = by_base.bisect_right(offset)
            lo = hi = None
            if i > 0:
                base, (key, count) = by_base.peekitem(i - 1)
                lo = HeadRow(key, base, count)
            if i < len(by_base):
                base, (key, count) = by_base.peekitem(i)
                hi = HeadRow(key, base, count)
            return lo, hi

    def forget(self, prefix: bytes, row: HeadRow) -> None:
        with self._lock:
            known = self._rows.get(prefix)
            if known is not None and known[0].get(row.base) == (row.key, row.count):
                del known[0][row.base], known[1][row.base]

    def __len__(self) -> int:
        with self._lock:
            return sum(len(by_base) for by_base, _ in self._rows.values())
