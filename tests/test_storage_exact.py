"""Store.publish_exact_async against a real LevelDB under tmp_path: exact-offset writes
(tmsgate migrate copies Kafka partitions with their offsets kept), the gap rows between
their messages, a copy starting where its source's log starts, resuming a copy, reopen,
transactional readers, TTL, and how they mix with plain publishes. Ends with a Hypothesis
property test against a dict offset -> message.

Every reader passes over a gap row, but for the earliest offset it is a row like any
other: a topic whose first row is a gap starts at the gap (as a Kafka log may start at a
compacted-away offset). A copy of a partition whose log starts at S writes no leading gap:
its first call, on a topic never written to, starts at S. Time comes from the FakeClock in
conftest.py unless a test says otherwise."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tmsgate.storage import (
    Entry,
    Message,
    OffsetGap,
    OffsetOutOfRange,
    Store,
    TopicId,
    TopicNotFound,
    keys,
    open_store,
)


@pytest.fixture
def store_url(any_engine_url: str) -> str:
    """Every test here runs on LevelDB and on memory:// (atomic per row only)."""
    return any_engine_url


LONG = 3600.0  # a transaction timeout no test reaches by accident


def exact(store: Store, topic: TopicId, base: int, items, end: int) -> int:
    return store.publish_exact_async(topic, base, items, end).result(timeout=10)


def read_all(store: Store, topic: TopicId, offset: int | None = None, tx=None) -> list[Message]:
    """Every message from ``offset`` (default: earliest) to the end, in pages of 3."""
    out: list[Message] = []
    pos = store.offsets(topic)[0] if offset is None else offset
    while True:
        res = store.read(topic, offset=pos, max_messages=3, tx=tx)
        out.extend(res.messages)
        if res.held or res.next_offset == pos:
            return out
        pos = res.next_offset


def offsets_of(msgs: list[Message]) -> list[int]:
    return [m.offset for m in msgs]


def contents(msgs: list[Message]) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(m.offset, m.payload, m.meta) for m in msgs]


def raw_rows(store: Store, topic: TopicId) -> list[tuple[int, int, int]]:
    """(flags, base, count) of every MessageTable row of the topic (white-box)."""
    prefix = keys.all_generations_prefix(keys.MESSAGE, topic)
    return [
        keys.ROW_HEAD.unpack_from(v)
        for _, v in store._backend.scan(prefix, keys.prefix_end(prefix))
    ]


@pytest.fixture
def gappy(store: Store, topic: TopicId) -> list[Message]:
    """Offsets 0, 1, 5, 6 hold messages; 2-4 and 7-9 are gaps; the topic continues at 10."""
    items = [(0, b"m0"), (1, Entry(b"m1", meta=b"k=1")), (5, Entry(None, meta=b"tomb")), (6, b"m6")]
    assert exact(store, topic, 0, items, 10) == 10
    return store.read(topic, offset=0).messages


# --- gaps between messages ----------------------------------------------------------------
def test_messages_keep_their_offsets_and_gaps_are_passed_over(
    store: Store, topic: TopicId, gappy: list[Message], clock
) -> None:
    assert contents(gappy) == [
        (0, b"m0", None),
        (1, b"m1", b"k=1"),
        (5, None, b"tomb"),
        (6, b"m6", None),
    ]
    assert all(m.write_pointer is None and m.publish_ts == clock.now for m in gappy)
    ids = [m.id for m in gappy]
    assert all(a < b for a, b in itertools.pairwise(ids))
    assert store.offsets(topic) == (0, 10)
    assert store.last_stable_offset(topic) == 10
    res = store.read(topic, offset=0)
    assert res.next_offset == 10 and not res.held

    for start in (2, 3, 4, 5):  # inside the gap: the read starts at the next message
        res = store.read(topic, offset=start)
        assert offsets_of(res.messages) == [5, 6] and res.next_offset == 10, start
    assert store.read(topic, offset=2, max_messages=1).messages == [gappy[2]]
    assert store.read(topic, offset=2, max_messages=1).next_offset == 6
    # a page that ends right before a gap continues after it
    res = store.read(topic, offset=0, max_messages=2)
    assert offsets_of(res.messages) == [0, 1] and res.next_offset == 2
    assert offsets_of(store.read(topic, offset=res.next_offset).messages) == [5, 6]
    for start in (7, 8, 9):  # the trailing gap: nothing, and the next offset moves past it
        res = store.read(topic, offset=start)
        assert res.messages == [] and res.next_offset == 10 and not res.held, start
    assert store.read(topic, offset=10).messages == []
    with pytest.raises(OffsetOutOfRange):
        store.read(topic, offset=11)

    # the other ways in see the same messages
    assert store.poll(topic) == gappy
    assert store.read(topic).next_offset == 10
    assert store.poll(topic, start=clock.now) == gappy
    assert store.poll(topic, start=gappy[1].id, inclusive=False) == gappy[2:]
    assert read_all(store, topic) == gappy


def test_every_gap_is_one_row(store: Store, topic: TopicId, gappy: list[Message]) -> None:
    # Each run of consecutive offsets is one packed row (keys.F_PACKED), each gap one row.
    packed = keys.F_PACKED | keys.F_PAYLOAD
    assert raw_rows(store, topic) == [
        (packed, 0, 2),
        (keys.F_GAP, 2, 3),
        (packed, 5, 2),
        (keys.F_GAP, 7, 3),
    ]


def test_gap_reads_across_many_rows_and_milliseconds(store: Store, topic: TopicId, clock) -> None:
    """start_for_offset searches row keys by interpolation: gaps of very different sizes,
    over many milliseconds, must not throw its guesses off."""
    expected: dict[int, bytes] = {}
    nxt = 0
    for i in range(60):
        clock.advance(i % 3)
        gap = (i * 37) % 11 if i % 5 else 1_000
        items = [(nxt + gap + j, f"{i}-{j}".encode()) for j in range(i % 4)]
        end = nxt + gap + (i % 4) + (i % 2)
        assert exact(store, topic, nxt, items, end) == end
        expected.update(items)
        nxt = end
    assert store.offsets(topic) == (0, nxt)  # the first row is the gap 0-999
    assert [(m.offset, m.payload) for m in read_all(store, topic)] == sorted(expected.items())
    ordered = sorted(expected)
    for probe in range(0, nxt + 1, 97):
        following = [o for o in ordered if o >= probe][:2]
        res = store.read(topic, offset=probe, max_messages=2)
        assert offsets_of(res.messages) == following, probe


def test_offset_for_time_across_gaps(store: Store, topic: TopicId, clock) -> None:
    t0 = clock.now
    exact(store, topic, 0, [(0, b"a"), (1, b"b")], 2)
    clock.advance(10)
    exact(store, topic, 2, [(5, b"c")], 6)  # the gap 2-4 and message 5 at t0 + 10
    assert store.offset_for_time(topic, t0) == 0
    assert store.offset_for_time(topic, t0 + 11) == 6
    for ts in (t0 + 1, t0 + 10):
        found = store.offset_for_time(topic, ts)
        assert 2 <= found <= 5  # the gap's row or the message: a read there starts at 5
        assert offsets_of(store.read(topic, offset=found).messages) == [5]


# --- where a topic starts -----------------------------------------------------------------
def test_a_copy_starts_where_the_source_log_starts(store: Store, topic: TopicId) -> None:
    """A source partition whose log starts at 100: on a topic never written to, the first
    span may start there, and the topic's offsets start there too (no leading gap)."""
    assert exact(store, topic, 100, [(100, b"a"), (101, b"b"), (102, b"c")], 103) == 103
    assert store.offsets(topic) == (100, 103)
    assert [flags for flags, _, _ in raw_rows(store, topic)] == [keys.F_PACKED | keys.F_PAYLOAD]
    for below in (0, 50, 99):
        with pytest.raises(OffsetOutOfRange) as err:
            store.read(topic, offset=below)
        assert (err.value.offset, err.value.earliest, err.value.next_offset) == (below, 100, 103)
    assert offsets_of(store.read(topic, offset=100).messages) == [100, 101, 102]
    assert offsets_of(store.poll(topic)) == [100, 101, 102]
    assert offsets_of(store.poll(topic, start=0)) == [100, 101, 102]
    assert [m.payload for m in read_all(store, topic)] == [b"a", b"b", b"c"]
    # once written to, the topic no longer jumps
    with pytest.raises(OffsetGap):
        exact(store, topic, 104, [(104, b"d")], 105)


def test_an_empty_span_on_a_new_topic_marks_its_start(
    store: Store, topic: TopicId, open_test_store
) -> None:
    """An empty span at the source's log start (a partition emptied by retention): one
    row of no offsets records where the topic starts, so that it survives a reopen and
    the next span cannot jump again."""
    assert exact(store, topic, 500, [], 500) == 500
    assert raw_rows(store, topic) == [(keys.F_GAP, 500, 0)]
    assert store.offsets(topic) == (500, 500)
    assert store.last_stable_offset(topic) == 500
    res = store.read(topic)
    assert res.messages == [] and res.next_offset == 500
    assert store.read(topic, offset=500).messages == []
    with pytest.raises(OffsetOutOfRange):
        store.read(topic, offset=0)
    store.close()

    store = open_test_store()
    assert store.offsets(topic) == (500, 500)
    with pytest.raises(OffsetGap) as err:
        exact(store, topic, 600, [], 600)
    assert (err.value.offset, err.value.next_offset) == (600, 500)
    assert exact(store, topic, 500, [(500, b"first"), (502, b"second")], 505) == 505
    assert store.offsets(topic) == (500, 505)
    assert contents(store.poll(topic)) == [(500, b"first", None), (502, b"second", None)]
    assert offsets_of(store.read(topic, offset=501).messages) == [502]
    with pytest.raises(OffsetOutOfRange):
        store.read(topic, offset=499)


def test_a_new_topic_may_start_with_a_gap(store: Store, topic: TopicId) -> None:
    assert exact(store, topic, 500, [(503, b"x")], 506) == 506
    assert raw_rows(store, topic) == [
        (keys.F_GAP, 500, 3),
        (keys.F_PAYLOAD, 503, 1),
        (keys.F_GAP, 504, 2),
    ]
    assert store.offsets(topic) == (500, 506)  # the gap is the first row
    for start in (500, 501, 503):
        assert offsets_of(store.read(topic, offset=start).messages) == [503], start
    assert store.read(topic, offset=504).next_offset == 506


def test_offsets_beyond_32_bits(store: Store, topic: TopicId, open_test_store) -> None:
    start = 5_000_000_000  # a busy partition's log start
    assert exact(store, topic, start, [(start, b"a"), (start + 3, b"b")], start + 10) == start + 10
    assert store.offsets(topic) == (start, start + 10)
    assert offsets_of(store.read(topic, offset=start + 1).messages) == [start + 3]
    store.close()
    store = open_test_store()
    assert store.offsets(topic) == (start, start + 10)
    assert store.publish(topic, [b"c"]).base_offset == start + 10


def test_a_leading_gap_is_passed_over_like_any_gap(store: Store, topic: TopicId) -> None:
    """A span from 0 whose first message is at 100: the gap 0-99 is the topic's first row,
    so the earliest offset is 0, and a read from anywhere in it starts at 100."""
    assert exact(store, topic, 0, [(100, b"a"), (101, b"b"), (102, b"c")], 103) == 103
    assert store.offsets(topic) == (0, 103)
    for start in (0, 50, 99, 100):
        res = store.read(topic, offset=start)
        assert offsets_of(res.messages) == [100, 101, 102] and res.next_offset == 103, start
    assert offsets_of(store.poll(topic)) == [100, 101, 102]


def test_a_topic_of_only_gaps(store: Store, topic: TopicId) -> None:
    assert exact(store, topic, 0, [], 500) == 500
    assert store.offsets(topic) == (0, 500)
    assert store.last_stable_offset(topic) == 500
    for start in (0, 499, 500):
        res = store.read(topic, offset=start)
        assert res.messages == [] and res.next_offset == 500 and not res.held, start
    res = store.read(topic)
    assert res.messages == [] and res.next_offset == 500
    assert exact(store, topic, 500, [(500, b"first")], 501) == 501
    assert store.offsets(topic) == (0, 501)
    assert offsets_of(store.read(topic, offset=0).messages) == [500]


# --- resuming a copy ----------------------------------------------------------------------
def test_the_same_span_twice_writes_nothing_new(store: Store, topic: TopicId, gappy) -> None:
    rows = raw_rows(store, topic)
    again = [(0, b"other"), (1, b"other"), (5, b"other"), (6, b"other")]
    assert exact(store, topic, 0, again, 10) == 10
    assert raw_rows(store, topic) == rows
    assert store.poll(topic) == gappy
    assert store.offsets(topic) == (0, 10)
    assert exact(store, topic, 3, [(6, b"x")], 8) == 10  # wholly below the next offset
    assert exact(store, topic, 10, [], 10) == 10  # empty span at the end
    assert raw_rows(store, topic) == rows


def test_an_overlapping_span_writes_only_its_new_part(
    store: Store, topic: TopicId, gappy: list[Message]
) -> None:
    # a resumed copy re-sends offsets 5-14: 5 and 6 are there already, 7-9 a gap
    items = [(5, b"dup5"), (6, b"dup6"), (8, b"dup8"), (11, b"m11"), (12, b"m12")]
    assert exact(store, topic, 5, items, 15) == 15
    msgs = read_all(store, topic)
    assert msgs[:4] == gappy
    assert contents(msgs[4:]) == [(11, b"m11", None), (12, b"m12", None)]
    assert store.offsets(topic) == (0, 15)
    assert offsets_of(store.read(topic, offset=7).messages) == [11, 12]
    assert store.read(topic, offset=13).next_offset == 15


def test_a_span_beyond_the_next_offset_is_refused(
    store: Store, topic: TopicId, gappy: list[Message]
) -> None:
    rows = raw_rows(store, topic)
    fut = store.publish_exact_async(topic, 11, [(11, b"lost?")], 12)
    with pytest.raises(OffsetGap) as err:
        fut.result(timeout=10)
    assert (err.value.offset, err.value.next_offset) == (11, 10)
    assert raw_rows(store, topic) == rows
    assert store.offsets(topic) == (0, 10)
    assert exact(store, topic, 10, [(10, b"m10")], 11) == 11  # the right one still goes


def test_a_span_that_ends_before_it_starts_is_refused(store: Store, topic: TopicId) -> None:
    with pytest.raises(ValueError):
        store.publish_exact_async(topic, 5, [], 4)
    assert store.offsets(topic) == (0, 0)
    assert raw_rows(store, topic) == []


def test_missing_topic(store: Store) -> None:
    fut = store.publish_exact_async(TopicId("default", "nope"), 0, [(0, b"x")], 1)
    with pytest.raises(TopicNotFound):
        fut.result(timeout=10)


@pytest.mark.parametrize("base", [10, 12], ids=["continuing", "new-topic-start"])
def test_a_failed_span_writes_nothing(store: Store, topic: TopicId, base: int) -> None:
    """An item the store cannot encode fails the whole call after earlier runs and gaps of
    it were appended to the batch: none of them may land, nor move the next offset (nor,
    on a new topic, where it starts)."""
    if base == 10:
        exact(store, topic, 0, [(0, b"m0")], 10)
    rows = raw_rows(store, topic)
    before = store.offsets(topic)
    bad = [(base, b"ok"), (base + 3, "not bytes")]
    fut = store.publish_exact_async(topic, base, bad, base + 5)  # type: ignore[list-item]
    with pytest.raises(Exception):  # noqa: B017 - whatever the encoder raises
        fut.result(timeout=10)
    assert raw_rows(store, topic) == rows
    assert store.offsets(topic) == before
    assert exact(store, topic, base, [(base, b"ok"), (base + 3, b"m")], base + 5) == base + 5
    assert offsets_of(store.read(topic, offset=base).messages) == [base, base + 3]


def test_pipelined_spans_apply_in_order(store: Store, topic: TopicId) -> None:
    """Calls queued without waiting land in call order; a re-sent span queued behind the
    first is skipped, not written twice."""
    futs = [
        store.publish_exact_async(topic, 0, [(1, b"a")], 3),
        store.publish_exact_async(topic, 0, [(1, b"a-again")], 3),
        store.publish_exact_async(topic, 3, [(3, b"b"), (7, b"c")], 8),
        store.publish_exact_async(topic, 9, [(9, b"too far")], 10),
        store.publish_exact_async(topic, 8, [], 9),
    ]
    assert [f.result(timeout=10) for f in (futs[0], futs[1], futs[2], futs[4])] == [3, 3, 8, 9]
    with pytest.raises(OffsetGap):
        futs[3].result(timeout=10)
    assert contents(store.poll(topic)) == [(1, b"a", None), (3, b"b", None), (7, b"c", None)]
    assert store.offsets(topic) == (0, 9)


def test_listeners_hear_the_end_of_the_span(store: Store, topic: TopicId) -> None:
    seen: list[tuple[TopicId, int]] = []
    store.add_listener(lambda t, n: seen.append((t, n)))
    exact(store, topic, 0, [(0, b"a"), (4, b"b")], 9)
    assert seen[-1] == (topic, 9)


# --- reopen -------------------------------------------------------------------------------
def test_offsets_messages_and_gaps_survive_reopen(
    store: Store, topic: TopicId, open_test_store, gappy: list[Message]
) -> None:
    lead = TopicId("default", "lead")
    store.create_topic(lead)
    exact(store, lead, 100, [(100, b"a"), (101, b"b")], 150)  # starts at 100, gap 102-149
    lead_msgs = store.poll(lead)
    store.close()

    store = open_test_store()
    assert store.offsets(topic) == (0, 10)  # the trailing gap 7-9 still counts
    assert store.offsets(lead) == (100, 150)
    assert store.poll(topic) == gappy  # same ids, payloads and meta
    assert store.poll(lead) == lead_msgs
    assert offsets_of(store.read(topic, offset=3).messages) == [5, 6]
    res = store.read(topic, offset=8)
    assert res.messages == [] and res.next_offset == 10
    with pytest.raises(OffsetOutOfRange):
        store.read(lead, offset=99)
    # the copy resumes where it stood: a re-send is skipped, a skip forward refused
    assert exact(store, topic, 5, [(5, b"dup"), (6, b"dup")], 10) == 10
    with pytest.raises(OffsetGap):
        exact(store, topic, 11, [(11, b"x")], 12)
    with pytest.raises(OffsetGap):
        exact(store, lead, 151, [], 151)
    assert exact(store, topic, 10, [(12, b"m12")], 13) == 13
    assert offsets_of(read_all(store, topic)) == [0, 1, 5, 6, 12]
    assert store.publish(lead, [b"plain"]).base_offset == 150


def test_an_all_gap_topic_survives_reopen(store: Store, topic: TopicId, open_test_store) -> None:
    exact(store, topic, 0, [], 500)
    store.close()
    store = open_test_store()
    assert store.offsets(topic) == (0, 500)
    assert store.read(topic, offset=0).next_offset == 500
    assert store.publish(topic, [b"x"]).base_offset == 500
    assert store.offsets(topic) == (0, 501)


# --- transactions -------------------------------------------------------------------------
def test_transactional_readers_pass_over_gaps(
    store: Store, topic: TopicId, gappy: list[Message]
) -> None:
    tm = store.transactions
    snap = tm.snapshot()
    assert read_all(store, topic, tx=snap) == gappy
    res = store.read(topic, offset=2, tx=snap)
    assert offsets_of(res.messages) == [5, 6] and res.next_offset == 10 and not res.held
    res = store.read(topic, offset=7, tx=snap)
    assert res.messages == [] and res.next_offset == 10 and not res.held

    # an open transaction's row at 10, then more copied offsets with gaps after it
    pending = tm.start(timeout_s=LONG)
    assert store.publish(topic, [b"pending"], tx=pending).base_offset == 10
    assert exact(store, topic, 11, [(13, b"m13")], 16) == 16
    assert store.last_stable_offset(topic) == 10
    res = store.read(topic, offset=7, tx=tm.snapshot())
    assert res.messages == [] and res.next_offset == 10 and res.held
    assert offsets_of(store.read(topic, offset=7).messages) == [10, 13]  # non-transactional

    tm.commit(pending)
    assert store.last_stable_offset(topic) == 16
    res = store.read(topic, offset=7, tx=tm.snapshot())
    assert offsets_of(res.messages) == [10, 13] and res.next_offset == 16 and not res.held
    res = store.read(topic, offset=11, tx=tm.snapshot())
    assert offsets_of(res.messages) == [13] and res.next_offset == 16

    aborted = tm.start(timeout_s=LONG)
    store.publish(topic, [b"aborted"], tx=aborted)  # 16
    exact(store, topic, 17, [], 20)
    assert store.last_stable_offset(topic) == 16
    tm.abort(aborted)
    assert store.last_stable_offset(topic) == 20
    res = store.read(topic, offset=14, tx=tm.snapshot())
    assert res.messages == [] and res.next_offset == 20 and not res.held


def test_last_stable_offset_ignores_gaps(store: Store, topic: TopicId) -> None:
    assert exact(store, topic, 0, [], 7) == 7
    assert store.last_stable_offset(topic) == 7
    assert exact(store, topic, 7, [(9, b"a")], 12) == 12
    assert store.last_stable_offset(topic) == 12


# --- retention ----------------------------------------------------------------------------
def test_ttl_expires_gaps_as_rows(store: Store, open_test_store, clock) -> None:
    t = TopicId("default", "short")
    store.create_topic(t, {"ttl": "1"})
    t0 = clock.now  # a whole second: the log start moves in 1 s steps for a 1 s ttl
    assert exact(store, t, 3, [(3, b"a"), (4, b"b"), (5, b"c")], 6) == 6  # starts at 3
    assert store.offsets(t) == (3, 6)
    clock.now = t0 + 1_000
    assert exact(store, t, 6, [(8, b"d"), (9, b"e")], 12) == 12  # gaps 6-7 and 10-11
    assert offsets_of(store.poll(t)) == [3, 4, 5, 8, 9]

    clock.now = t0 + 1_100  # 3-5 expired, but the log start has not moved yet
    assert store.offsets(t) == (3, 12)
    assert offsets_of(store.poll(t)) == [8, 9]
    res = store.read(t, offset=3)
    assert offsets_of(res.messages) == [8, 9] and res.next_offset == 12

    clock.now = t0 + 2_000  # the next step: the log start is the gap 6-7, the first row left
    assert store.offsets(t) == (6, 12)
    with pytest.raises(OffsetOutOfRange) as err:
        store.read(t, offset=5)
    assert (err.value.earliest, err.value.next_offset) == (6, 12)
    for start in (6, 7, 8):
        assert offsets_of(store.read(t, offset=start).messages) == [8, 9], start

    stats = store.cleanup()
    assert stats["rows_deleted"] == 1  # messages 3-5, one packed row
    assert store.offsets(t) == (6, 12)
    assert offsets_of(read_all(store, t)) == [8, 9]
    res = store.read(t, offset=10)
    assert res.messages == [] and res.next_offset == 12

    clock.now = t0 + 10_000  # everything expired, gaps too
    assert store.poll(t) == [] and store.offsets(t) == (12, 12)
    store.cleanup()
    assert raw_rows(store, t) == []
    store.close()
    store = open_test_store()
    assert store.offsets(t) == (12, 12)  # the next offset survives through the checkpoint
    with pytest.raises(OffsetGap):  # and the topic is not new again
        exact(store, t, 13, [], 14)
    assert exact(store, t, 12, [(13, b"f")], 14) == 14
    assert store.offsets(t) == (12, 14)
    assert offsets_of(store.read(t, offset=12).messages) == [13]


def test_a_gap_alone_after_expired_messages(store: Store, clock) -> None:
    t = TopicId("default", "short")
    store.create_topic(t, {"ttl": "1"})
    t0 = clock.now
    exact(store, t, 0, [(0, b"a"), (1, b"b")], 2)
    clock.now = t0 + 1_500
    exact(store, t, 2, [], 9)  # only a gap is left once 0-1 expire
    assert store.offsets(t) == (0, 9)
    clock.now = t0 + 2_000
    assert store.offsets(t) == (2, 9)
    res = store.read(t, offset=2)
    assert res.messages == [] and res.next_offset == 9
    assert store.read(t).next_offset == 9
    clock.now = t0 + 3_000
    assert store.offsets(t) == (9, 9)


def test_a_start_marker_expires_but_the_start_stays(store: Store, open_test_store, clock) -> None:
    t = TopicId("default", "short")
    store.create_topic(t, {"ttl": "1"})
    exact(store, t, 700, [], 700)
    clock.advance(5_000)
    store.cleanup()
    assert raw_rows(store, t) == []
    store.close()
    store = open_test_store()
    assert store.offsets(t) == (700, 700)
    with pytest.raises(OffsetGap):
        exact(store, t, 800, [], 800)
    assert exact(store, t, 700, [(700, b"x")], 701) == 701


# --- with plain publishes -----------------------------------------------------------------
def test_plain_publish_continues_after_an_exact_span(
    store: Store, topic: TopicId, gappy: list[Message]
) -> None:
    r = store.publish(topic, [b"p10", b"p11"])
    assert r.base_offset == 10 and r.count == 2
    assert store.offsets(topic) == (0, 12)
    assert offsets_of(read_all(store, topic)) == [0, 1, 5, 6, 10, 11]
    assert offsets_of(store.read(topic, offset=7).messages) == [10, 11]
    # and exact spans go on from there
    with pytest.raises(OffsetGap):
        exact(store, topic, 13, [], 14)
    assert exact(store, topic, 12, [(14, b"e14")], 16) == 16
    assert store.publish(topic, [b"p16"]).base_offset == 16
    assert exact(store, topic, 10, [(10, b"x"), (16, b"x")], 17) == 17  # all written before
    msgs = read_all(store, topic)
    assert offsets_of(msgs) == [0, 1, 5, 6, 10, 11, 14, 16]
    assert [m.payload for m in msgs[4:]] == [b"p10", b"p11", b"e14", b"p16"]
    ids = [m.id for m in msgs]
    assert all(a < b for a, b in itertools.pairwise(ids))


def test_exact_span_after_plain_publishes(store: Store, topic: TopicId) -> None:
    store.publish(topic, [b"a", b"b", b"c"])
    with pytest.raises(OffsetGap):  # written to: not a new topic
        exact(store, topic, 50, [], 50)
    assert exact(store, topic, 3, [(5, b"f")], 6) == 6
    assert contents(store.poll(topic)) == [
        (0, b"a", None),
        (1, b"b", None),
        (2, b"c", None),
        (5, b"f", None),
    ]


def test_plain_publish_on_a_topic_started_by_a_copy(store: Store, topic: TopicId) -> None:
    exact(store, topic, 100, [], 100)
    assert store.publish(topic, [b"x"]).base_offset == 100
    assert store.offsets(topic) == (100, 101)


# --- limits and bad input ------------------------------------------------------------
def test_a_gap_of_more_than_four_billion_offsets(store: Store, topic: TopicId) -> None:
    far = 1 + 2**32
    assert exact(store, topic, 0, [(0, b"a"), (far, b"b")], far + 1) == far + 1
    assert offsets_of(store.read(topic, offset=1).messages) == [far]


def test_items_outside_the_span_are_refused(store: Store, topic: TopicId) -> None:
    with pytest.raises(ValueError):
        store.publish_exact_async(topic, 0, [(5, b"x")], 3).result(timeout=10)
    assert store.offsets(topic) == (0, 0)


def test_items_out_of_order_are_refused(store: Store, topic: TopicId) -> None:
    with pytest.raises(ValueError):
        store.publish_exact_async(topic, 0, [(2, b"x"), (1, b"y")], 3).result(timeout=10)
    assert store.offsets(topic) == (0, 0)


# --- property test ------------------------------------------------------------------------
# Hypothesis runs many short store lifetimes; a fresh LevelDB on tmpfs is cheap (see
# test_storage_model.py). Function-scoped fixtures do not mix with @given.
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
EPOCH_MS = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = EPOCH_MS

    def __call__(self) -> int:
        return self.now


@dataclass(frozen=True)
class Span:
    start: str  # next | behind (a resumed copy) | zero (the whole copy again) | beyond
    back: int  # how far behind (or beyond) the next offset the span starts
    length: int
    rel: tuple[int, ...]  # item offsets relative to the span's start, increasing
    kinds: tuple[str, ...]  # per item: plain | meta | null
    advance_ms: int
    reopen: bool


@st.composite
def spans(draw: st.DrawFn) -> Span:
    length = draw(st.one_of(st.integers(0, 25), st.integers(200, 2_000)))
    rel: list[int] = []
    if length:
        rel = draw(st.lists(st.integers(0, length - 1), unique=True, max_size=min(length, 12)))
    kinds = draw(
        st.lists(st.sampled_from(["plain", "meta", "null"]), min_size=len(rel), max_size=len(rel))
    )
    return Span(
        start=draw(st.sampled_from(["next", "next", "behind", "zero", "beyond"])),
        back=draw(st.integers(1, 8)),
        length=length,
        rel=tuple(sorted(rel)),
        kinds=tuple(kinds),
        advance_ms=draw(st.sampled_from([0, 0, 1, 1_500])),
        reopen=draw(st.integers(0, 4)) == 0,
    )


def _item(kind: str, call: int, offset: int) -> tuple[bytes | Entry, bytes | None, bytes | None]:
    payload = f"c{call}@{offset}".encode()
    if kind == "plain":
        return payload, payload, None
    if kind == "meta":
        return Entry(payload, meta=b"h" + payload), payload, b"h" + payload
    return Entry(None, meta=b"n" + payload), None, b"n" + payload


def _check(
    store: Store,
    topic: TopicId,
    model: dict[int, tuple[bytes | None, bytes | None]],
    first_row: int | None,
    nxt: int,
    probes: set[int],
) -> None:
    earliest = nxt if first_row is None else min(first_row, nxt)
    assert store.offsets(topic) == (earliest, nxt)
    assert store.last_stable_offset(topic) == nxt
    if earliest > 0:
        with pytest.raises(OffsetOutOfRange):
            store.read(topic, offset=0)
        with pytest.raises(OffsetOutOfRange):
            store.read(topic, offset=earliest - 1)
    with pytest.raises(OffsetOutOfRange):
        store.read(topic, offset=nxt + 1)

    # everything from the earliest offset, in pages of 3
    got: list[Message] = []
    pos = earliest
    while True:
        res = store.read(topic, offset=pos, max_messages=3)
        assert not res.held
        got.extend(res.messages)
        if len(res.messages) == 3:
            assert res.next_offset == res.messages[-1].offset + 1
        else:
            assert res.next_offset == nxt, (pos, res)
        if res.next_offset == pos:
            break
        pos = res.next_offset
    expected = [(o, *model[o]) for o in sorted(model)]
    assert contents(got) == expected
    assert all(m.write_pointer is None for m in got)
    assert all(a.id < b.id for a, b in itertools.pairwise(got))
    res = store.read(topic, max_messages=len(model) + 1)
    assert contents(res.messages) == expected and res.next_offset == nxt
    snap = store.transactions.snapshot()  # a transactional reader sees the same
    assert contents(read_all(store, topic, offset=earliest, tx=snap)) == expected

    # single reads from around every message, every span's ends and within gaps
    ordered = sorted(model)
    for probe in sorted(p for p in probes if earliest <= p <= nxt):
        following = [o for o in ordered if o >= probe][:2]
        res = store.read(topic, offset=probe, max_messages=2)
        assert offsets_of(res.messages) == following, probe
        if len(following) < 2:
            assert res.next_offset == nxt


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(spans(), min_size=1, max_size=6))
def test_exact_spans_match_a_model(calls: list[Span]) -> None:
    """Successive spans (some re-sending what was written, some starting beyond the next
    offset) against a dict offset -> (payload, meta): after every call and every reopen
    the store reads back exactly the model, from any offset, in pages."""
    directory = tempfile.mkdtemp(prefix="tms-exact-", dir=SCRATCH)
    url = f"leveldb://{directory}"
    clock = Clock()
    store = open_store(url, clock=clock)
    try:
        topic = TopicId("model", "exact")
        store.create_topic(topic)
        model: dict[int, tuple[bytes | None, bytes | None]] = {}
        nxt = 0
        first_row: int | None = None  # where the topic's first row starts
        probes: set[int] = {0}
        for call, span in enumerate(calls):
            clock.now += span.advance_ms
            base = {
                "next": nxt,
                "behind": max(nxt - span.back, 0),
                "zero": 0,
                "beyond": nxt + span.back,
            }[span.start]
            end = base + span.length
            made = [
                (base + r, _item(kind, call, base + r))
                for r, kind in zip(span.rel, span.kinds, strict=True)
            ]
            items = [(offset, item) for offset, (item, _, _) in made]
            fut = store.publish_exact_async(topic, base, items, end)
            if base > nxt and nxt != 0:
                with pytest.raises(OffsetGap) as err:
                    fut.result(timeout=10)
                assert (err.value.offset, err.value.next_offset) == (base, nxt)
            else:
                if base > nxt:  # a topic never written to starts where the span does
                    nxt = base
                    if first_row is None:
                        first_row = base
                assert fut.result(timeout=10) == max(nxt, end)
                if end > nxt and first_row is None:
                    first_row = nxt
                for offset, (_, payload, meta) in made:
                    if offset >= nxt:  # below it was written before: skipped
                        model[offset] = (payload, meta)
                nxt = max(nxt, end)
                probes.update((base, base + 1, end - 1, end, (base + end) // 2))
            probes.update(itertools.chain.from_iterable((o - 1, o, o + 1) for o in model))
            _check(store, topic, model, first_row, nxt, probes)
            if span.reopen:
                store.close()
                store = open_store(url, clock=clock)
                _check(store, topic, model, first_row, nxt, probes)
        store.close()
        store = open_store(url, clock=clock)
        _check(store, topic, model, first_row, nxt, probes)
        assert store.publish(topic, [b"after"]).base_offset == nxt  # plain publishes go on
    finally:
        store.close()
        shutil.rmtree(directory, ignore_errors=True)
