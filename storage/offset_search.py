"""The HBase engine's search for the MessageTable row holding a Kafka offset
(hbase.py ``seek_offset``), without I/O: what it reads comes through ``SearchIO``, so the
search is the same whether the rows come from HBase's Thrift server or from a list (tests).

Base offsets grow with row keys (the store appends), so the rows of one salt bucket, a
sample of the topic's, are searched as reader.start_for_offset searches all rows
(interpolation, every other probe halving), each probe one scanner on one bucket reading
PROBE_ROWS rows' heads. That leaves the target between two consecutive rows of the bucket
(or two rows a few offsets apart); one merged scan of the other buckets over that range
(about ``buckets`` rows) finds it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from . import keys
from .offset_hints import HeadRow
from .reader import next_guess

PROBE_ROWS = 8  # rows an offset search probe reads (d:o cells only): one may end the search


@dataclass(frozen=True, slots=True)
class SearchIO:
    """The reads the search makes, on the searched bucket and across buckets."""

    probe: Callable[[bytes, bytes, bool, int], tuple[list[HeadRow], bool]]
    """(start, stop, reverse, n): the searched bucket's first (last, with reverse) ``n``
    rows in [start, stop), in key order, and whether that is all of them."""

    ends: Callable[[bytes, bytes, list[bool]], dict[bool, list[HeadRow]]]
    """(start, stop, which): the searched bucket's first row (False) and last row (True) in
    [start, stop), each asked for in ``which`` ([] where there is none): one probe each,
    which the engine may run at once."""

    merged: Callable[[list[int], bytes, bytes], Iterator[HeadRow]]
    """(buckets, start, stop): the rows of those buckets in [start, stop), merged in key
    order."""


def search_buckets(
    prefix: bytes,
    offset: int,
    lo: HeadRow | None,
    hi: HeadRow | None,
    buckets: int,
    bucket: int,
    io: SearchIO,
) -> tuple[HeadRow | None, HeadRow | None]:
    """The row of ``prefix`` holding ``offset`` (the last starting at or below it; None if
    none does), searched between verified rows ``lo`` (base <= offset; None: from the
    topic's first key) and ``hi`` (base > offset; None: past the topic's last row), with
    ``bucket`` the bucket searched; and the first row found above the offset (None if
    none was read), worth remembering as a hint too."""
    plen = len(prefix)
    lo_key = prefix if lo is None else lo.key
    hi_key = keys.prefix_end(prefix) if hi is None else hi.key
    # Rows holding at most this many offsets between two known rows (so at most this
    # many rows) are read by one merged scan rather than searched for.
    near = 2 * buckets

    # ``low`` starts at or below the offset, ``upper`` above it (None: not known; a
    # merged scan then runs from the range's start or to its end). ``gapless``: the
    # bucket has no row between them, so the merged scan skips the bucket.
    low, upper, gapless = lo, hi, False
    if low is None or upper is None:
        # Without a hint, the bucket's first or last row in the range is an end of
        # the search, as the topic's are in reader.py.
        ends = [r for r, known in ((False, low), (True, upper)) if known is None]
        fetched = io.ends(lo_key, hi_key, ends)
        first, last = fetched.get(False), fetched.get(True)
        if first == [] or last == []:
            gapless = True  # no row of the bucket in the range
        elif first and first[0].base > offset:
            upper, gapless = first[0], True  # none of the bucket before it
        elif last and last[0].base <= offset:
            low, gapless = last[0], True  # none of the bucket after it
        else:
            low, upper = low or first[0], upper or last[0]  # type: ignore[index]
    if not gapless and low is not None and upper is not None:
        # reader.start_for_offset's loop, over the bucket's rows. Invariant: the
        # bucket has no row in [hi_i, upper) (keys as integers). It ends when the
        # bucket has no row between ``low`` and ``upper`` (hi_i == lo_i + 1, or the
        # probes show it), or when few offsets (so few rows) lie between them.
        lo_i, lo_base = keys.message_key_int(low.key, plen), low.base
        hi_i, hi_base = keys.message_key_int(upper.key, plen), upper.base
        n = 0
        while not gapless and hi_i - lo_i > 1 and upper.base - low.base > near:
            guess = next_guess(n, offset, lo_i, lo_base, hi_i, hi_base)
            n += 1
            key = prefix + keys.message_key_suffix(guess)
            rows, done = io.probe(key, prefix + keys.message_key_suffix(hi_i), False, PROBE_ROWS)
            if not rows:
                # None in [guess, hi): the bucket's last rows below the guess instead
                # (key gaps, a pause or the seq numbers a millisecond left unused,
                # would take a halving each).
                hi_i = guess
                rows, done = io.probe(
                    prefix + keys.message_key_suffix(lo_i + 1), key, True, PROBE_ROWS
                )
                if not rows:
                    gapless = True  # no row of the bucket in (low, hi)
                elif rows[-1].base <= offset:
                    low, gapless = rows[-1], True  # none of the bucket after it
                elif rows[0].base <= offset:
                    i = next(i for i, r in enumerate(rows) if r.base > offset)
                    low, upper, gapless = rows[i - 1], rows[i], True  # consecutive
                else:
                    upper, hi_i, hi_base = (
                        rows[0],
                        keys.message_key_int(rows[0].key, plen),
                        rows[0].base,
                    )
                    gapless = done  # and no more of the bucket down to ``low``
                continue
            below = [r for r in rows if r.base <= offset]  # rows from the guess on
            if len(below) < len(rows):  # read a row above the offset
                if below:  # and the one before it: consecutive rows of the bucket
                    low, upper, gapless = below[-1], rows[len(below)], True
                else:
                    upper, hi_i, hi_base = rows[0], guess, rows[0].base
            else:
                low, lo_i, lo_base = (
                    below[-1],
                    keys.message_key_int(below[-1].key, plen),
                    below[-1].base,
                )
                gapless = done  # and no more of the bucket up to hi_i
        gapless = gapless or hi_i - lo_i <= 1
    # The target is ``low`` or a row of the merged scan between ``low`` and ``upper``
    # (none if ``low`` holds the offset: every later row starts above it).
    best, above = low, upper
    scanned = [b for b in range(buckets) if b != bucket or not gapless]
    if scanned and (best is None or best.base + best.count <= offset):
        span = (lo_key if low is None else low.key, hi_key if upper is None else upper.key)
        for row in io.merged(scanned, *span):
            if row.base > offset:
                above = row
                break
            best = row
    return best, above
