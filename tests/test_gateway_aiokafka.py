"""aiokafka (Produce v7, Fetch v11, ApiVersions v0) against a live gateway."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from gateway_harness import GatewayThread, gateway_thread


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with gateway_thread(tmp_path_factory.mktemp("aio")) as g:
        yield g


async def _consume(bootstrap: str, topic: str, upto: int, **kw: Any) -> tuple[list[Any], int]:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **kw)
    await c.start()
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    await c.seek_to_beginning(tp)
    out: list[Any] = []
    try:
        async with asyncio.timeout(10):
            while await c.position(tp) < upto:
                for msgs in (await c.getmany(timeout_ms=300)).values():
                    out += msgs
        return out, await c.position(tp)
    finally:
        await c.stop()


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_codecs_headers_nulls(gw: GatewayThread, codec: str | None) -> None:
    topic = f"aio-{codec}"

    async def run() -> None:
        p = AIOKafkaProducer(
            bootstrap_servers=gw.bootstrap, compression_type=codec, enable_idempotence=True
        )
        await p.start()
        batch = p.create_batch()
        for i in range(20):
            batch.append(
                key=None if i % 2 else b"k%d" % i,
                value=None if i == 5 else b"v%d" % i,
                timestamp=1_650_000_000_000 + i,
                headers=[("h", b"%d" % i)],
            )
        meta = await (await p.send_batch(batch, topic, partition=0))
        assert meta.offset == 0
        await p.send_and_wait(topic, b"last")
        await p.stop()
        msgs, _ = await _consume(gw.bootstrap, topic, 21)
        assert [m.offset for m in msgs] == list(range(21))
        assert msgs[5].value is None and msgs[1].key is None and msgs[2].key == b"k2"
        assert msgs[3].headers == (("h", b"3"),) and msgs[3].timestamp == 1_650_000_000_003

    asyncio.run(run())


def test_read_committed_skips_rolled_back(gw: GatewayThread) -> None:
    topic = "aio-rolled"
    store = gw.broker.store

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=gw.bootstrap)
        await p.start()
        await p.send_and_wait(topic, b"a")
        tid = gw.broker.topics.topic_id(topic)
        tx = store.transactions.start(timeout_s=30)
        store.rollback(tid, store.publish(tid, [b"x", b"y"], tx=tx).rollback)
        store.transactions.abort(tx)
        await p.stop()
        msgs, pos = await _consume(gw.bootstrap, topic, 3, isolation_level="read_committed")
        assert [m.value for m in msgs] == [b"a"] and pos == 3

    asyncio.run(run())


def test_auto_create_off_reports_unknown_topic(tmp_path: Any) -> None:
    with gateway_thread(tmp_path, auto_create_topics=False) as g:

        async def run() -> None:
            p = AIOKafkaProducer(bootstrap_servers=g.bootstrap, request_timeout_ms=1500)
            await p.start()
            with pytest.raises(Exception):  # noqa: B017 - aiokafka raises its own timeout type
                await asyncio.wait_for(p.send_and_wait("aio-none", b"x"), 3)
            await p.stop()

        asyncio.run(run())
