"""Kafka batches kept as produced (storage keys.F_KAFKA_BATCH), on every engine: a topic
written with publish_kafka_batch_async reads back, by every reader, exactly as the same
records written as messages (publish_async with produce's entries) read back, and a read
with ``kafka_batches`` returns each wholly wanted row as the batch as sent."""

from __future__ import annotations

import random
from collections.abc import Callable

import kafka_requests
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tmsgate.protocol import batch_messages, decode_batch, encode_meta
from tmsgate.storage import (
    KAFKA_BATCH_MAX_RECORDS,
    MessageRow,
    ReadResult,
    StorageError,
    Store,
    StoredBatch,
    TopicId,
    keys,
)

TS = 1_700_000_000_000


@pytest.fixture
def store_url(any_engine_url: str) -> str:
    return any_engine_url


def kafka_batch(records: list[tuple], codec: int = 0) -> bytes:
    """A v2 batch as a producer sends it, record i stamped TS + i."""
    return kafka_requests.batch(records, codec=codec, timestamp=TS)


def random_records(rng: random.Random, n: int) -> list[tuple]:
    out = []
    for _ in range(n):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 20))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 300))
        headers = [(f"h{j}", rng.choice([None, rng.randbytes(5)])) for j in range(rng.randrange(3))]
        out.append((key, value, headers))
    return out


def as_entries(raw: bytes) -> list[tuple[bytes | None, bytes | None, None]]:
    """What Produce stores per record when it does not keep the batch (records.to_entries
    for records without the transaction header)."""
    return [
        (r.value, encode_meta(r.key, r.headers, r.timestamp), None)
        for r in decode_batch(raw).records
    ]


def read_rows(store: Store, topic: TopicId, page: int, **how: object) -> list[MessageRow]:
    out: list = []
    pos = 0
    while True:
        res: ReadResult = store.read(topic, offset=pos, max_messages=page, **how)  # type: ignore[arg-type]
        out += res.rows
        if res.next_offset == pos:
            return out
        pos = res.next_offset


@pytest.mark.parametrize("codec", [0, 1, 3])  # none, gzip, lz4
def test_a_kept_batch_reads_back_as_its_messages(
    open_test_store: Callable[..., Store], clock: object, codec: int
) -> None:
    """Two topics get the same produces, one as messages and one as kept batches, at the
    same clock: offset, id and time reads, in pages cutting batches anywhere, agree row
    for row; and so does every row after a reopen."""
    store = open_test_store()
    as_messages, as_batches = TopicId("t", "messages"), TopicId("t", "batches")
    store.create_topic(as_messages)
    store.create_topic(as_batches)
    rng = random.Random(codec)
    for n in (1, 5, 40, 3, 17):
        raw = kafka_batch(random_records(rng, n), codec)
        a = store.publish_async(as_messages, as_entries(raw)).result()
        b = store.publish_kafka_batch_async(as_batches, raw, n).result()
        assert (a.base_offset, a.count, a.first_id, a.last_id) == (
            b.base_offset,
            b.count,
            b.first_id,
            b.last_id,
        )
    for page in (1, 3, 7, 100):
        assert read_rows(store, as_batches, page) == read_rows(store, as_messages, page)
    mids = [row[0] for row in read_rows(store, as_messages, 100)]
    for mid in (mids[0], mids[3], mids[44], mids[-1]):
        for inclusive in (True, False):
            got = store.read(as_batches, start=mid, inclusive=inclusive, max_messages=9).rows
            want = store.read(as_messages, start=mid, inclusive=inclusive, max_messages=9).rows
            assert got == want
    got = store.read(as_batches, start=TS, max_messages=1000).rows
    assert got == store.read(as_messages, start=TS, max_messages=1000).rows
    assert len(got) == 66
    store.close()
    store = open_test_store()
    assert read_rows(store, as_batches, 10) == read_rows(store, as_messages, 10)
    assert store.offsets(as_batches) == store.offsets(as_messages) == (0, 66)


@pytest.mark.parametrize("codec", [0, 4])  # none, zstd: PayloadTable rows are never sent as is
def test_a_transactions_kept_batch_reads_back_as_its_messages(
    open_test_store: Callable[..., Store], clock: object, codec: int
) -> None:
    """store_kafka_batch_async (a Kafka transaction's Produce) against store_async of the
    same records: after the commit, every read agrees row for row."""
    store = open_test_store()
    as_messages, as_batches = TopicId("t", "tx-messages"), TopicId("t", "tx-batches")
    store.create_topic(as_messages)
    store.create_topic(as_batches)
    rng = random.Random(11)
    tx = store.transactions.start()
    for n in (3, 30, 1):
        raw = kafka_batch(random_records(rng, n), codec)
        a = store.store_async(as_messages, as_entries(raw), tx).result()
        b = store.store_kafka_batch_async(as_batches, raw, n, tx).result()
        assert (a.count, a.start_ts, a.start_seq, a.end_seq) == (
            b.count,
            b.start_ts,
            b.start_seq,
            b.end_seq,
        )
    assert store.publish(as_messages, [], tx=tx).count == 34
    assert store.publish(as_batches, [], tx=tx).count == 34
    store.transactions.commit(tx)
    for page in (1, 4, 100):
        assert read_rows(store, as_batches, page) == read_rows(store, as_messages, page)
        assert len(read_rows(store, as_batches, page)) == 34


def test_a_fetch_read_takes_whole_batches_as_sent(
    open_test_store: Callable[..., Store], clock: object
) -> None:
    store = open_test_store()
    topic = TopicId("t", "fetch")
    store.create_topic(topic)
    rng = random.Random(7)
    sent = [kafka_batch(random_records(rng, n)) for n in (4, 6, 5)]
    for raw in sent:
        store.publish_kafka_batch_async(
            topic, raw, decode_batch(raw).last_offset_delta + 1
        ).result()

    res = store.read(topic, offset=0, max_messages=100, kafka_batches=True)
    assert [type(r) for r in res.rows] == [StoredBatch] * 3
    assert [(r.base_offset, r.count) for r in res.rows] == [(0, 4), (4, 6), (10, 5)]
    assert [bytes(r.batch) for r in res.rows] == sent
    assert res.next_offset == 15 and res.settled

    # From inside a batch: its messages from the offset on, then whole batches.
    res = store.read(topic, offset=2, max_messages=100, kafka_batches=True)
    assert [r[2] for r in res.rows[:2]] == [2, 3]
    assert [type(r) for r in res.rows[2:]] == [StoredBatch, StoredBatch]

    # max_bytes: a batch that would pass it waits for the next read, unless it is first.
    first = len(sent[0])
    res = store.read(topic, offset=0, max_bytes=first + 1, kafka_batches=True)
    assert [r.base_offset for r in res.rows] == [0] and res.next_offset == 4
    res = store.read(topic, offset=4, max_bytes=1, kafka_batches=True)
    assert [r.base_offset for r in res.rows] == [4] and res.next_offset == 10
    # ... and the next read continues from where that one ended.
    res = store.read(topic, offset=10, max_messages=1, kafka_batches=True)
    assert [(r.base_offset, r.count) for r in res.rows] == [(10, 5)]


def test_a_kept_batch_is_checked_and_a_damaged_one_reported(
    open_test_store: Callable[..., Store], clock: object
) -> None:
    store = open_test_store()
    topic = TopicId("t", "bounds")
    store.create_topic(topic)
    raw = kafka_batch([(None, b"v", [])])
    with pytest.raises(ValueError):
        store.publish_kafka_batch_async(topic, raw, 0)
    with pytest.raises(ValueError):
        store.publish_kafka_batch_async(topic, raw, KAFKA_BATCH_MAX_RECORDS + 1)
    with pytest.raises(ValueError):
        store.publish_kafka_batch_async(topic, raw[:40], 1)
    # A row whose records do not decode (damaged on disk) fails the read that decodes
    # it, with a storage error naming it, and the count is checked too.
    value = keys.encode_kafka_batch_row(0, 1, raw[:-3] + b"\xff\xff\xff")
    with pytest.raises(StorageError, match="damaged"):
        keys.unpack_messages(value)
    with pytest.raises(StorageError, match="holds 1 records, not 2"):
        keys.unpack_messages(keys.encode_kafka_batch_row(0, 2, raw))


def test_batch_messages_is_what_produce_stores() -> None:
    rng = random.Random(3)
    for codec in (0, 1, 2, 3):
        raw = kafka_batch(random_records(rng, 30), codec)
        assert batch_messages(raw) == as_entries(raw)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400), count=st.integers(1, 5), flip=st.integers(0, 400))
def test_any_damage_to_a_kept_batch_is_a_storage_error(data: bytes, count: int, flip: int) -> None:
    """Whatever bytes a damaged row holds, a read gets its messages or a StorageError."""
    good = kafka_batch([(b"k", b"v" * 50, [("h", b"x")]), (None, None, [])])
    for raw in (data, good[:flip] + data + good[flip + len(data) :]):
        value = keys.encode_kafka_batch_row(0, count, raw)
        try:
            keys.unpack_messages(value)
            list(keys.iter_messages(value, 1))
        except StorageError:
            pass
