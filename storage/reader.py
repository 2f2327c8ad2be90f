"""Reading a topic: the seed's MessageTable scan with the PayloadTable detour.

A scan walks MessageTable rows in key (= consumption) order. A row with a payload is one
message; a row without one refers to every PayloadTable row of its write pointer. With a
transaction, rows are filtered as Tephra says: rolled-back and invalid rows are skipped,
and the scan stops (holds) at the first row whose transaction is still in progress.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from . import keys
from .backend import Backend
from .ids import MessageId, MessageRow, ReadResult, StoredBatch
from .topics import TopicState
from .transactions import Transaction, Visibility

_MESSAGE_ID = keys.MESSAGE_SUFFIX  # the first 10 bytes of an id are the row suffix
_TS = keys.U64.unpack_from
_HM = keys.ROW_HEAD_META.size


@dataclass(slots=True)
class ScanStart:
    """Where a scan begins: a row key, and what to drop from the first row(s)."""

    key: bytes
    skip_below_offset: int = -1  # drop messages with offset < this
    skip_until_id: bytes | None = None  # drop messages with id < (or <=) this
    skip_equal: bool = False  # with skip_until_id: drop the id itself too (exclusive start)
    # The value of the row at ``key``, when the search just read it: read() starts with it
    # instead of asking the backend for it again (only engines with seek_offset set it).
    first: bytes | None = None


# The log start moves in whole steps of this share of the TTL, within these bounds.
LOG_START_STEP_SHARE = 10
LOG_START_STEP_MIN_MS = 1_000
LOG_START_STEP_MAX_MS = 3_600_000


def ttl_floor_key(st: TopicState, now_ms: int) -> bytes:
    """The first key reads return: rows below it have outlived the topic's TTL."""
    ttl = st.ttl_ms
    if ttl is None:
        return st.msg_prefix
    return st.msg_prefix + _MESSAGE_ID.pack(max(now_ms - ttl, 0), 0)


def log_start_ms(ttl_ms: int, now_ms: int) -> int:
    """The publish time where the log starts: the TTL floor rounded down to a whole step.

    Reads apply the TTL exactly (the seed's read-time TTL), but the earliest offset a
    client is told moves in steps, as Kafka's log start moves a whole segment at a time.
    Were it to follow the TTL floor, it would move with every message expiring: at 500
    messages a second an offset named by ListOffsets(earliest) was out of range 2 ms
    later, and librdkafka's reset-to-earliest loop never fetched. Within a step, offsets
    between the log start and the TTL floor are in range and read as expired (skipped).
    The janitor deletes only below this point, so the log start's row stays put."""
    step = min(max(ttl_ms // LOG_START_STEP_SHARE, LOG_START_STEP_MIN_MS), LOG_START_STEP_MAX_MS)
    floor = max(now_ms - ttl_ms, 0)
    return floor - floor % step


def log_start_key(st: TopicState, now_ms: int) -> bytes:
    """The key of the log start (see log_start_ms): the earliest offset is its first row."""
    ttl = st.ttl_ms
    if ttl is None:
        return st.msg_prefix
    return st.msg_prefix + _MESSAGE_ID.pack(log_start_ms(ttl, now_ms), 0)


def next_guess(probe: int, offset: int, lo: int, lo_base: int, hi: int, hi_base: int) -> int:
    """The row key (as an integer) to probe next when searching for ``offset`` between rows
    ``lo`` (base offset ``lo_base``, at or below the offset) and ``hi`` (``hi_base``, above
    it): interpolated on even probes, halfway on odd ones (interpolation alone crawls over
    unevenly paced data; the halvings bound a search to ~2 x 80 probes), always strictly
    between the two."""
    if probe % 2 == 0 and hi_base > lo_base:
        guess = lo + (offset - lo_base) * (hi - lo) // (hi_base - lo_base)
    else:
        guess = (lo + hi) // 2
    return min(max(guess, lo + 1), hi - 1)


def start_for_offset(backend: Backend, st: TopicState, offset: int) -> ScanStart:
    """Find the row holding ``offset`` by searching the row keys themselves.

    Offsets and row keys grow together, so no separate index is kept: an index under its
    own key prefix would put a second key range into every LevelDB file, and those files
    could then never move down a level without being rewritten (it made compaction the
    biggest CPU cost of sustained writes). The search guesses where the offset lies by
    interpolation, halving the range every other probe, so it takes a handful of seeks
    for evenly paced data and at most ~2 x 80 for any data.

    A backend with ``seek_offset(prefix, offset)`` does the search itself: on hbase://
    a probe here would scan every salt bucket, so the engine searches one bucket's rows
    and keeps verified hints (storage/hbase.py). It answers the row this search ends on
    (the last starting at or below the offset) with its value, which the read then
    starts with; or None when no row starts at or below the offset."""
    seek = backend.seek_offset
    if seek is not None:
        found = seek(st.msg_prefix, offset)
        if found is None:
            return ScanStart(st.msg_prefix, skip_below_offset=offset)
        key, value = found
        return ScanStart(key, skip_below_offset=offset, first=value)
    key = find_offset_row(backend, st.msg_prefix, offset)
    return ScanStart(st.msg_prefix if key is None else key, skip_below_offset=offset)


def find_offset_row(backend: Backend, prefix: bytes, offset: int) -> bytes | None:
    """start_for_offset's search over the rows of ``prefix``: the key of the last row
    whose base offset is at most ``offset``, or None to start at the first row (none
    starts below the offset). Also run by the owner of a served:// store (served.py),
    so that a worker's search is one call instead of a call per probe."""
    plen = len(prefix)
    end = keys.prefix_end(prefix)
    first = _row_at(backend, prefix, end)
    if first is None or first[1] >= offset:
        return None
    last = None
    for key, value in backend.scan(prefix, end, reverse=True):
        last = (key, keys.ROW_HEAD.unpack_from(value)[1])
        break
    assert last is not None
    if last[1] <= offset:
        return last[0]
    # Row keys as integers (ts << 16 | seq). Invariant: the row holding the offset is at
    # key lo or later, and before hi; lo is a row with base <= offset.
    lo, lo_base = keys.message_key_int(first[0], plen), first[1]
    hi, hi_base = keys.message_key_int(last[0], plen), last[1]
    probe = 0
    while hi - lo > 1:
        guess = next_guess(probe, offset, lo, lo_base, hi, hi_base)
        probe += 1
        found = _row_at(backend, prefix + keys.message_key_suffix(guess), end)
        if found is None or keys.message_key_int(found[0], plen) >= hi:
            hi = guess  # no row in [guess, hi)
        elif found[1] <= offset:
            lo, lo_base = keys.message_key_int(found[0], plen), found[1]
        else:
            hi, hi_base = guess, found[1]  # rows from guess on start above the offset
    return prefix + keys.message_key_suffix(lo)


def _row_at(backend: Backend, start: bytes, end: bytes) -> tuple[bytes, int] | None:
    """The first row at or after ``start``: (key, base offset)."""
    for key, value in backend.scan(start, end):
        return key, keys.ROW_HEAD.unpack_from(value)[1]
    return None


def start_for_id(
    backend: Backend, st: TopicState, message_id: MessageId, inclusive: bool
) -> ScanStart:
    """Where a read from ``message_id`` begins: its row's key, or the key of the packed
    row before it that holds it (its message i has the row's seq + i)."""
    key = st.msg_prefix + bytes(message_id[:10])
    for row_key, value in backend.scan(st.msg_prefix, key + b"\x00", reverse=True):
        flags, _, count = keys.ROW_HEAD.unpack_from(value)
        if row_key < key and flags & keys.F_PACKED:
            plen = len(st.msg_prefix)
            ts, seq = _MESSAGE_ID.unpack_from(row_key, plen)
            want_ts, want_seq = _MESSAGE_ID.unpack_from(key, plen)
            if ts == want_ts and want_seq < seq + count:
                key = row_key
        break
    return ScanStart(key, skip_until_id=bytes(message_id), skip_equal=not inclusive)


def start_for_time(st: TopicState, ts_ms: int, inclusive: bool) -> ScanStart:
    ts = max(ts_ms if inclusive else ts_ms + 1, 0)
    return ScanStart(st.msg_prefix + _MESSAGE_ID.pack(ts, 0))


def read(
    backend: Backend,
    st: TopicState,
    start: ScanStart,
    *,
    now_ms: int,
    max_messages: int,
    max_bytes: int | None,
    tx: Transaction | None,
    next_offset: int,
    sealed: Callable[[int], Visibility] | None = None,
    kafka_batches: bool = False,
) -> ReadResult:
    """Up to ``max_messages`` from ``start``. ``tx``: a transactional reader's snapshot
    (None reads everything written, the TMS non-transactional read). ``sealed(wp)``:
    how a reader without a snapshot treats a sealed reference (its transaction's state
    now). ``kafka_batches`` (a Kafka fetch): a row holding a Kafka batch that the read
    wants whole comes as one StoredBatch item (counted as one toward ``max_messages``,
    never past ``max_bytes`` unless first), not as its messages."""
    prefix, plen = st.msg_prefix, len(st.msg_prefix)
    settled = True  # only plain rows so far (ReadResult.settled)
    floor = ttl_floor_key(st, now_ms)
    begin = max(start.key, floor)
    out: list[MessageRow] = []
    size = 0
    resume = None  # the offset to continue from
    held = False
    split = None  # the key of the packed row the read stopped inside (ReadResult.split)
    skip_off, skip_id, skip_eq = start.skip_below_offset, start.skip_until_id, start.skip_equal
    decode = keys.decode_row
    head = keys.ROW_HEAD.unpack_from
    head_meta = keys.ROW_HEAD_META.unpack_from
    plain, plain_meta = keys.F_PAYLOAD, keys.F_PAYLOAD | keys.F_META
    kafka_batch = keys.F_KAFKA_BATCH if kafka_batches else -1
    zeros = bytes(10)
    if start.first is not None and begin == start.key:
        # The search read the first row: the scan (lazy) is asked only for the rest.
        rest = backend.scan(begin, keys.prefix_end(prefix), include_start=False)
        rows: Iterator[tuple[bytes, bytes]] = itertools.chain(((begin, start.first),), rest)
    else:
        rows = backend.scan(begin, keys.prefix_end(prefix))
    for key, value in rows:
        flags, base, count = head(value)
        if base >= next_offset:
            break  # written, but not yet acknowledged as durable
        if flags == plain_meta and skip_id is None and base >= skip_off:
            # The common row (a Kafka record): no transaction, no ttl, meta and payload.
            # Unpacked here rather than by decode_row: this runs once per message read.
            n = head_meta(value)[3]
            meta, payload = value[_HM : _HM + n], value[_HM + n :]
            out.append((key[plen:] + zeros, payload, base, _TS(key, plen)[0], None, meta))
            size += len(payload) + n
            resume = base + 1
            if len(out) >= max_messages or (max_bytes is not None and size >= max_bytes):
                break
            continue
        if flags == plain and skip_id is None and base >= skip_off:
            # A message with only a payload (the store's own API, no meta).
            payload = value[13:]
            out.append((key[plen:] + zeros, payload, base, _TS(key, plen)[0], None, None))
            size += len(payload)
            resume = base + 1
            if len(out) >= max_messages or (max_bytes is not None and size >= max_bytes):
                break
            continue
        end = base + count
        if end <= skip_off:
            continue
        if flags == kafka_batch and base >= skip_off and skip_id is None:
            # A produced batch the fetch sends as it is stored (a fetch from inside one
            # takes its messages, below: one decode, after which fetches start at rows).
            stored = StoredBatch(key, base, count, keys.kafka_batch_of(value))
            if out and max_bytes is not None and size + len(stored.batch) > max_bytes:
                break
            out.append(stored)
            size += len(stored.batch)
            resume = end
            skip_off = -1
            if len(out) >= max_messages or (max_bytes is not None and size >= max_bytes):
                break
            continue
        if flags & keys.F_PACKED:
            # A packed run of plain messages: message i has offset base + i and the id
            # of the row's seq + i (keys.F_PACKED).
            ts, seq = _MESSAGE_ID.unpack_from(key, plen)
            full = True
            first = max(skip_off - base, 0) if skip_id is None else 0
            for i, (p, m, msg_ttl) in enumerate(keys.iter_messages(value, first), first):
                offset = base + i
                mid = _MESSAGE_ID.pack(ts, seq + i) + zeros
                if offset < skip_off or (
                    skip_id is not None and (mid < skip_id or (skip_eq and mid == skip_id))
                ):
                    resume = offset + 1
                    continue
                if msg_ttl is not None:
                    settled = False
                    if ts + msg_ttl < now_ms:
                        resume = offset + 1
                        continue
                if out and (
                    len(out) >= max_messages or (max_bytes is not None and size >= max_bytes)
                ):
                    full, split = False, key
                    break
                out.append((mid, p, offset, ts, None, m))
                size += len(p or b"") + len(m or b"")
                resume = offset + 1
            if full:
                resume = end
            skip_off, skip_id = -1, None
            if len(out) >= max_messages or (max_bytes is not None and size >= max_bytes):
                break
            continue
        flags, base, count, wp, msg_ttl, meta, payload = decode(value)
        settled = False
        if flags & keys.F_GAP:  # offsets without messages: pass over them
            resume = end
            continue
        shown_wp, vis = wp, Visibility.ACCEPT
        if wp is not None and flags & keys.F_SEALED:
            # A Kafka transaction's records: held from every reader until the commit
            # (the commit's window between writing this row and the transaction
            # manager's commit), then plain messages.
            if tx is not None:
                vis = tx.visibility(wp)
            elif sealed is not None:
                vis = sealed(wp)
            shown_wp = None
        elif wp is not None and tx is not None:
            vis = tx.visibility(wp)
        if vis is Visibility.SKIP:
            resume = end
            continue
        if vis is Visibility.HOLD:
            held = True
            break
        ts = _MESSAGE_ID.unpack_from(key, plen)[0]
        if msg_ttl is not None and ts + msg_ttl < now_ms:
            resume = end
            continue
        suffix = key[plen:]
        if flags & (keys.F_PAYLOAD | keys.F_NULL):
            mid = suffix + zeros
            if (skip_id is not None) and (mid < skip_id or (skip_eq and mid == skip_id)):
                resume = end
                continue
            out.append((mid, payload, base, ts, shown_wp, meta))
            size += (len(payload) if payload else 0) + (len(meta) if meta else 0)
            resume = end
        else:
            full = True
            rows = _payload_messages(backend, st, wp or 0, shown_wp, suffix, base, ts, now_ms)
            for msg, expired in rows:
                mid, offset = msg[0], msg[2]
                if (
                    expired
                    or offset < skip_off
                    or (skip_id is not None and (mid < skip_id or (skip_eq and mid == skip_id)))
                ):
                    resume = offset + 1
                    continue
                if out and (
                    len(out) >= max_messages or (max_bytes is not None and size >= max_bytes)
                ):
                    full = False
                    break
                out.append(msg)
                size += len(msg[1] or b"") + len(msg[5] or b"")
                resume = offset + 1
            if full:
                resume = end
        skip_off, skip_id = -1, None  # only the first rows can be partly before the start
        if len(out) >= max_messages or (max_bytes is not None and size >= max_bytes):
            break
    if resume is None:  # nothing read or skipped: stay where the scan began
        if start.skip_below_offset >= 0:
            resume = start.skip_below_offset
            if begin > start.key:
                # The scan began at the TTL floor, above the offset's row: every offset
                # below the floor's first row has expired, so move past them.
                after = min(first_offset_at(backend, st, begin, next_offset), next_offset)
                resume = max(resume, after)
        else:
            resume = first_offset_at(backend, st, begin, next_offset)
    return ReadResult(out, resume, held, settled and not held, split)


def first_row_at(backend: Backend, st: TopicState, key: bytes) -> tuple[bytes, int] | None:
    """The first row at or after ``key``: (its key, its base offset), or None."""
    return _row_at(backend, key, keys.prefix_end(st.msg_prefix))


def first_offset_at(backend: Backend, st: TopicState, key: bytes, default: int) -> int:
    """The base offset of the first row at or after ``key`` (``default`` if there is none)."""
    row = first_row_at(backend, st, key)
    return default if row is None else row[1]


def _payload_messages(
    backend: Backend,
    st: TopicState,
    wp: int,
    shown_wp: int | None,
    row_suffix: bytes,
    base: int,
    publish_ts: int,
    now_ms: int,
) -> Iterator[tuple[MessageRow, bool]]:
    """The messages a PayloadTable reference row stands for, with offsets base, base+1, ...,
    each with whether its own (shorter) TTL has run out since it was published."""
    prefix = st.payload_prefix + keys.U64.pack(abs(wp))
    plen = len(prefix)
    offset = base
    pack = keys.PAYLOAD_ROW.pack
    for key, value in backend.scan(prefix, keys.prefix_end(prefix)):
        # A row holds one message, or packed, several: message i has the key's pseq + i.
        ts, pseq = keys.PAYLOAD_ROW.unpack_from(key, plen)
        for payload, meta, ttl in keys.iter_messages(value):
            expired = ttl is not None and publish_ts + ttl < now_ms
            mid = row_suffix + pack(ts, pseq)
            yield (mid, payload, offset, publish_ts, shown_wp, meta), expired
            offset += 1
            pseq += 1
