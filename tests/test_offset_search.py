"""The HBase engine's offset search (storage/offset_search.py) over rows held in lists:
whatever the rows, their gaps and how they fall into buckets, it finds the last row
starting at or below the offset, as a scan of every row would, and reads few rows doing so.
tests/test_hbase_engine.py runs the same search through the engine, on the stand-in."""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tmsgate.storage import keys
from tmsgate.storage.ids import TopicId
from tmsgate.storage.offset_hints import HeadRow
from tmsgate.storage.offset_search import SearchIO, search_buckets

PREFIX = keys.data_prefix(keys.MESSAGE, TopicId("ns", "search"), 1)


class Buckets:
    """Rows spread over salt buckets, read as the engine reads them, counting rows read."""

    def __init__(self, rows: list[tuple[HeadRow, int]], buckets: int) -> None:
        self.rows = sorted(rows)
        self.buckets = buckets
        self.read = 0
        self.probes = 0

    def of(self, bucket: int, start: bytes, stop: bytes) -> list[HeadRow]:
        return [r for r, b in self.rows if b == bucket and start <= r.key < stop]

    def io(self, bucket: int) -> SearchIO:
        def probe(start: bytes, stop: bytes, reverse: bool, n: int) -> tuple[list[HeadRow], bool]:
            found = self.of(bucket, start, stop)
            got = found[-n:] if reverse else found[:n]
            self.probes += 1
            self.read += len(got)
            return got, len(found) <= n

        def ends(start: bytes, stop: bytes, which: list[bool]) -> dict[bool, list[HeadRow]]:
            return {r: probe(start, stop, r, 1)[0] for r in which}

        def merged(scanned: list[int], start: bytes, stop: bytes) -> Iterator[HeadRow]:
            for row, b in self.rows:
                if b in scanned and start <= row.key < stop:
                    self.read += 1
                    yield row

        return SearchIO(probe, ends, merged)


def make_rows(rng: random.Random, n: int, buckets: int) -> list[tuple[HeadRow, int]]:
    """``n`` rows in key order with growing base offsets, key gaps (pauses, unused seq
    numbers) and offset gaps (rows rolled back), each in a random bucket."""
    rows = []
    key_int, base = rng.randrange(1 << 40), rng.randrange(100)
    for _ in range(n):
        key_int += rng.choice([1, 1, 1, 2, 7, 1 << 16, 1 << rng.randrange(1, 40)])
        count = rng.randrange(1, 6)
        row = HeadRow(PREFIX + keys.message_key_suffix(key_int), base, count)
        rows.append((row, rng.randrange(buckets)))
        base += count + rng.choice([0, 0, 0, 0, 1, 50])
    return rows


def holding(rows: list[tuple[HeadRow, int]], offset: int) -> HeadRow | None:
    """The last row starting at or below ``offset``, by scanning all of them."""
    bases = [r.base for r, _ in rows]
    i = bisect.bisect_right(bases, offset)
    return rows[i - 1][0] if i else None


@pytest.mark.parametrize("buckets", [1, 4, 16])
def test_the_search_finds_the_row_a_full_scan_finds(buckets: int) -> None:
    rng = random.Random(buckets)
    rows = make_rows(rng, 3000, buckets)
    last = rows[-1][0]
    store = Buckets(rows, buckets)
    for _ in range(300):
        offset = rng.randrange(last.base + last.count + 20)
        bucket = rng.randrange(buckets)
        best, above = search_buckets(PREFIX, offset, None, None, buckets, bucket, store.io(bucket))
        assert best == holding(rows, offset), offset
        if above is not None:
            assert above.base > offset and (best is None or above.key > best.key)
    # Few rows read a search: a probe's rows, and about a row a bucket at the end.
    assert store.read / 300 < 20 * buckets + 200, store.read


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 1 << 32),
    n=st.integers(0, 200),
    buckets=st.integers(1, 8),
    offset=st.integers(0, 2000),
    hint=st.sampled_from(["none", "lo", "hi", "both"]),
)
def test_the_search_is_exact_with_or_without_hints(
    seed: int, n: int, buckets: int, offset: int, hint: str
) -> None:
    """Any rows (none, few, with gaps), any offset (before, inside, past them), with the
    bracketing rows a verified hint would give or without."""
    rng = random.Random(seed)
    rows = make_rows(rng, n, buckets)
    want = holding(rows, offset)
    lo = hi = None
    if hint in ("lo", "both") and want is not None:
        below = [r for r, _ in rows if r.base <= offset]
        lo = below[rng.randrange(len(below))]
    if hint in ("hi", "both"):
        above = [r for r, _ in rows if r.base > offset]
        hi = above[rng.randrange(len(above))] if above else None
    bucket = rng.randrange(buckets)
    store = Buckets(rows, buckets)
    best, _ = search_buckets(PREFIX, offset, lo, hi, buckets, bucket, store.io(bucket))
    assert best == want
