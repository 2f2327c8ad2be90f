"""Regression: records delivered twice near the head (issue, part 1).

Reproduced as reported: one small batch, then 100,000 small records from confluent-kafka
with linger.ms=50 and batch.size=1000000 (so librdkafka sends batches of up to 10,000
records, which the gateway keeps in its batch cache), then a consumer from offset 0.
confluent-kafka received 110,000 records for a high watermark of 100,001 (9,999 offsets
twice, offsets going backwards inside one response), kafka-python the same, aiokafka was
clean; ``--fetch-cache-mb 0`` made all three clean. The cause: a fetch read the store up
to an offset inside a cached batch and then appended that whole batch, whose first
records it had already sent.

Each client must deliver exactly the high watermark's worth of records, every offset
once, strictly increasing, each record the one produced there. The records are tiny
(5-byte values): with 100-byte values one store read fills the response and the bug
does not show.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from .conftest import scale

pytestmark = pytest.mark.timeout(300)

RECORDS = scale(100_000, 1_000_000)
CONSUME_BOUND_S = scale(120.0, 900.0)
HEAD_VALUE = b"head"


def value_of(i: int) -> bytes:
    return (b"%d" % i).ljust(5, b".")


def expected_value(offset: int) -> bytes:
    return HEAD_VALUE if offset == 0 else value_of(offset - 1)


@pytest.fixture(scope="module")
def loaded(fault_gateway_module):
    """(gateway, topic, high watermark) after one small batch and RECORDS small records."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    gw = fault_gateway_module(name="near-head")
    topic = "faults-near-head"
    first = Producer({"bootstrap.servers": gw.bootstrap})
    first.produce(topic, HEAD_VALUE)
    assert first.flush(30) == 0, "the first small batch was not acknowledged"
    errors: list[str] = []

    def done(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    p = Producer(
        {
            "bootstrap.servers": gw.bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "enable.idempotence": True,
        }
    )
    for i in range(RECORDS):
        while True:
            try:
                p.produce(topic, value_of(i), on_delivery=done)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0, "records left unacknowledged"
    assert not errors, f"produce errors: {errors[:3]}"
    c = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "faults-near-head-wm"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
    finally:
        c.close()
    assert (low, high) == (0, RECORDS + 1)
    return gw, topic, high


class Delivered:
    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.wrong: list[tuple[int, bytes]] = []
        self.backwards = 0

    def add(self, offset: int, value: bytes) -> None:
        if self.offsets and offset <= self.offsets[-1]:
            self.backwards += 1
        self.offsets.append(offset)
        if value != expected_value(offset) and len(self.wrong) < 10:
            self.wrong.append((offset, value))

    def done(self, high: int) -> bool:
        return bool(self.offsets) and self.offsets[-1] >= high - 1

    def twice(self) -> int:
        return len(self.offsets) - len(set(self.offsets))


def drain(poll, d: Delivered, high: int) -> None:
    """Poll until the last record came (then once more, for anything after it)."""
    deadline = time.monotonic() + CONSUME_BOUND_S
    while not d.done(high) and time.monotonic() < deadline:
        poll()
    if d.done(high):
        poll()


def consume_confluent(bootstrap: str, topic: str, high: int) -> Delivered:
    from confluent_kafka import Consumer, TopicPartition

    d = Delivered()
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "faults-near-head",
            "enable.auto.commit": False,
        }
    )

    def poll() -> None:
        for msg in c.consume(10_000, 0.5):
            assert not msg.error(), msg.error()
            d.add(msg.offset(), msg.value())

    try:
        c.assign([TopicPartition(topic, 0, 0)])
        drain(poll, d, high)
    finally:
        c.close()
    return d


def consume_kafka_python(bootstrap: str, topic: str, high: int) -> Delivered:
    from kafka import KafkaConsumer, TopicPartition

    d = Delivered()
    c = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=10_000
    )
    tp = TopicPartition(topic, 0)

    def poll() -> None:
        for batch in c.poll(timeout_ms=500).values():
            for r in batch:
                d.add(r.offset, r.value)

    try:
        c.assign([tp])
        c.seek(tp, 0)
        drain(poll, d, high)
    finally:
        c.close()
    return d


def consume_aiokafka(bootstrap: str, topic: str, high: int) -> Delivered:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    d = Delivered()

    async def run() -> None:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()
        tp = TopicPartition(topic, 0)
        try:
            c.assign([tp])
            c.seek(tp, 0)
            deadline = time.monotonic() + CONSUME_BOUND_S
            extra = 1
            while extra >= 0 and time.monotonic() < deadline:
                for batch in (await c.getmany(timeout_ms=500, max_records=10_000)).values():
                    for r in batch:
                        d.add(r.offset, r.value)
                if d.done(high):
                    extra -= 1
        finally:
            await c.stop()

    asyncio.run(run())
    return d


CLIENTS = {
    "confluent-kafka": consume_confluent,
    "kafka-python": consume_kafka_python,
    "aiokafka": consume_aiokafka,
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_each_offset_delivered_once_from_offset_0(loaded, client, faults_report):
    gw, topic, high = loaded
    t0 = time.monotonic()
    d = CLIENTS[client](gw.bootstrap, topic, high)
    faults_report(
        high_watermark=high,
        received=len(d.offsets),
        offsets_twice=d.twice(),
        backwards=d.backwards,
        wrong_values=len(d.wrong),
        consume_s=round(time.monotonic() - t0, 2),
    )
    assert d.twice() == 0 and d.backwards == 0, (
        f"{client}: {len(d.offsets)} records for a high watermark of {high}: "
        f"{d.twice()} offsets twice, {d.backwards} steps backwards"
    )
    assert len(d.offsets) == high, f"{client}: {len(d.offsets)} records, high watermark {high}"
    assert d.offsets == list(range(high)), f"{client}: offsets not dense from 0"
    assert not d.wrong, f"{client}: wrong records (offset, value): {d.wrong}"
