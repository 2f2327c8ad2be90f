"""aiokafka 0.14 against a live tmsgate gateway.

AIOKafkaProducer (defaults: no idempotence; one test with enable_idempotence=True),
AIOKafkaConsumer without a group (assign/seek/getmany), AIOKafkaAdminClient.
Each test drives its own event loop with asyncio.run, bounded by asyncio.wait_for.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from compat_helpers import (
    ADMIN_TIMEOUT_S,
    BEHIND_HEAD,
    CODECS,
    CONSUME_TIMEOUT_S,
    PRODUCE_TIMEOUT_S,
    WHILE_READING,
    Rec,
    assert_dense_offsets,
    assert_no_redelivery,
    assert_same_records,
    check_tiny_stream,
    make_records,
    sleep_past_ms_boundary,
    tiny_value,
)

pytestmark = pytest.mark.timeout(90)

TEST_BUDGET_S = 75


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TEST_BUDGET_S))


def new_producer(gateway, codec="none", **kw) -> AIOKafkaProducer:
    cfg = dict(
        bootstrap_servers=gateway.bootstrap,
        client_id="compat-aiokafka",
        compression_type=None if codec == "none" else codec,
        request_timeout_ms=10_000,
        linger_ms=5,
    )
    cfg.update(kw)
    return AIOKafkaProducer(**cfg)


def new_consumer(gateway, **kw) -> AIOKafkaConsumer:
    cfg = dict(
        bootstrap_servers=gateway.bootstrap,
        client_id="compat-aiokafka",
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        fetch_max_wait_ms=200,
        request_timeout_ms=10_000,
    )
    cfg.update(kw)
    return AIOKafkaConsumer(**cfg)


async def send_all(p: AIOKafkaProducer, topic: str, records: list[Rec]) -> list[int]:
    futs = [
        await p.send(topic, key=r.key, value=r.value, headers=list(r.headers), partition=0)
        for r in records
    ]
    metas = await asyncio.wait_for(asyncio.gather(*futs), PRODUCE_TIMEOUT_S)
    return [m.offset for m in metas]


async def produce(gateway, topic, records, codec="none", **kw) -> list[int]:
    p = new_producer(gateway, codec, **kw)
    await asyncio.wait_for(p.start(), PRODUCE_TIMEOUT_S)
    try:
        return await send_all(p, topic, records)
    finally:
        await p.stop()


async def consume(gateway, topic, n, start=0, **kw):
    c = new_consumer(gateway, **kw)
    await asyncio.wait_for(c.start(), CONSUME_TIMEOUT_S)
    tp = TopicPartition(topic, 0)
    out = []
    try:
        c.assign([tp])
        c.seek(tp, start)
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(out) < n and time.monotonic() < deadline:
            batch = await c.getmany(tp, timeout_ms=300)
            out.extend(batch.get(tp, []))
    finally:
        await c.stop()
    assert_no_redelivery([r.offset for r in out], f"aiokafka consumer from {start}")
    assert len(out) >= n, (
        f"consumed {len(out)} of {n} records from offset {start} in {CONSUME_TIMEOUT_S}s"
    )
    return out


def as_recs(records) -> list[Rec]:
    return [Rec(r.key, r.value, tuple((k, v) for k, v in r.headers)) for r in records]


@pytest.mark.parametrize("codec", CODECS)
def test_codec_roundtrip(gateway, topic, codec):
    records = make_records(300, codec, size=200)

    async def go():
        offsets = await produce(gateway, topic, records, codec)
        assert_dense_offsets(offsets, 0, len(records), "producer offsets")
        got = await consume(gateway, topic, len(records))
        assert_dense_offsets([r.offset for r in got], 0, len(records), "consumed offsets")
        assert_same_records(as_recs(got), records)

    run(go())


def test_idempotent_producer(gateway, topic):
    records = make_records(200, "idem", size=100)

    async def go():
        offsets = await produce(gateway, topic, records, "zstd", enable_idempotence=True)
        assert_dense_offsets(offsets, 0, len(records))
        got = await consume(gateway, topic, len(records))
        assert_same_records(as_recs(got), records)

    run(go())


def test_headers_roundtrip(gateway, topic):
    records = [
        Rec(b"k0", b"none", ()),
        Rec(b"k1", b"dup keys", (("dup", b"1"), ("dup", b"2"))),
        Rec(b"k2", b"empty + binary", (("e", b""), ("b", bytes(range(256))))),
        Rec(b"k3", b"unicode", (("ключ", "значение".encode()),)),
    ]

    async def go():
        assert_dense_offsets(await produce(gateway, topic, records, "gzip"), 0, len(records))
        assert_same_records(as_recs(await consume(gateway, topic, len(records))), records)

    run(go())


def test_null_key_and_null_value(gateway, topic):
    records = [
        Rec(None, b"null key", ()),
        Rec(b"tombstone", None, (("h", b"v"),)),
        Rec(b"", b"", ()),
    ]

    async def go():
        assert_dense_offsets(await produce(gateway, topic, records), 0, len(records))
        got = await consume(gateway, topic, len(records))
        assert_same_records(as_recs(got), records)
        assert (
            got[0].key is None
            and got[1].value is None
            and got[2].key == b""
            and got[2].value == b""
        )

    run(go())


def test_order_preserved_many_batches(gateway, topic):
    records = make_records(2000, "order", size=64)

    async def go():
        offsets = await produce(gateway, topic, records, "snappy", max_batch_size=2048)
        assert_dense_offsets(offsets, 0, len(records))
        got = await consume(gateway, topic, len(records))
        assert_dense_offsets([r.offset for r in got], 0, len(records))
        assert_same_records(as_recs(got), records)

    run(go())


def test_seek_to_middle(gateway, topic):
    records = make_records(50, "mid")

    async def go():
        await produce(gateway, topic, records, "lz4")
        got = await consume(gateway, topic, 25, start=25)
        assert_dense_offsets([r.offset for r in got], 25, 25)
        assert_same_records(as_recs(got), records[25:])

    run(go())


def test_read_while_producing(gateway, topic):
    """A consumer that starts 60,000 tiny records behind the head while the producer goes on
    gets every offset once, in order (see the kafka-python and confluent-kafka twins)."""
    total = BEHIND_HEAD + WHILE_READING

    async def main():
        p = new_producer(gateway, linger_ms=50, max_batch_size=100_000)
        await asyncio.wait_for(p.start(), PRODUCE_TIMEOUT_S)
        try:

            async def send(lo, hi):
                futs = [await p.send(topic, tiny_value(i), partition=0) for i in range(lo, hi)]
                await asyncio.wait_for(asyncio.gather(*futs), PRODUCE_TIMEOUT_S)

            await send(0, 1)
            await send(1, BEHIND_HEAD)
            more = asyncio.ensure_future(send(BEHIND_HEAD, total))
            got = await consume(gateway, topic, total)
            await more
        finally:
            await p.stop()
        return [(r.offset, r.value) for r in got]

    check_tiny_stream(run(main()), total, "aiokafka consumer while producing")


def test_restart_in_the_middle(gateway, topic):
    first = make_records(100, "before")
    second = make_records(50, "after-new", start=100)
    third = make_records(50, "after-old", start=150)

    async def go():
        p = new_producer(gateway, "gzip")
        await asyncio.wait_for(p.start(), PRODUCE_TIMEOUT_S)
        try:
            assert_dense_offsets(await send_all(p, topic, first), 0, 100, "before restart")
            await asyncio.get_running_loop().run_in_executor(None, gateway.restart)
            assert_dense_offsets(
                await produce(gateway, topic, second, "zstd"), 100, 50, "fresh producer"
            )
            assert_dense_offsets(await send_all(p, topic, third), 150, 50, "surviving producer")
        finally:
            await p.stop()
        got = await consume(gateway, topic, 200)
        assert_dense_offsets([r.offset for r in got], 0, 200)
        assert_same_records(as_recs(got), first + second + third)

    run(go())


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_list_offsets(gateway, topic, isolation):
    tp = TopicPartition(topic, 0)

    async def go():
        c = new_consumer(gateway, isolation_level=isolation)
        await asyncio.wait_for(c.start(), CONSUME_TIMEOUT_S)
        try:
            assert await c.beginning_offsets([tp]) == {tp: 0}
            assert await c.end_offsets([tp]) == {tp: 0}
            await produce(gateway, topic, make_records(30, "a"))
            ts = await asyncio.get_running_loop().run_in_executor(None, sleep_past_ms_boundary)
            await produce(gateway, topic, make_records(20, "b", start=30))
            assert await c.beginning_offsets([tp]) == {tp: 0}
            assert await c.end_offsets([tp]) == {tp: 50}
            found = (await c.offsets_for_times({tp: ts}))[tp]
            assert found is not None and found.offset == 30, found
            future = (await c.offsets_for_times({tp: int(time.time() * 1000) + 3_600_000}))[tp]
            assert future is None, future
        finally:
            await c.stop()

    run(go())


def test_admin_create_delete(gateway, topic_name):
    async def go():
        admin = AIOKafkaAdminClient(
            bootstrap_servers=gateway.bootstrap, request_timeout_ms=int(ADMIN_TIMEOUT_S * 1000)
        )
        await asyncio.wait_for(admin.start(), ADMIN_TIMEOUT_S)
        try:
            resp = await admin.create_topics([NewTopic(topic_name, 1, 1)])
            errors = [(t[0], t[1]) for t in resp.topic_errors]
            assert errors == [(topic_name, 0)], resp
            assert topic_name in await admin.list_topics()
            resp = await admin.create_topics([NewTopic(topic_name, 1, 1)])
            assert [t[1] for t in resp.topic_errors] == [36], resp  # TOPIC_ALREADY_EXISTS
            assert_dense_offsets(await produce(gateway, topic_name, make_records(3, "x")), 0, 3)
            resp = await admin.delete_topics([topic_name])
            assert [(t[0], t[1]) for t in resp.topic_error_codes] == [(topic_name, 0)], resp
            deadline = time.monotonic() + 10
            while topic_name in await admin.list_topics():
                assert time.monotonic() < deadline, "deleted topic still listed after 10 s"
                await asyncio.sleep(0.1)
        finally:
            await admin.close()

    run(go())
