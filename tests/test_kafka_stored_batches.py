"""Produced batches kept as sent (storage keys.F_KAFKA_BATCH) with real clients: a plain
batch is stored as one row and fetched from the store as the bytes the producer sent,
base offset replaced; every codec, every client and the HTTP bulk read get the same
records (key, value, headers, timestamp) as before; what must not be kept as sent (zstd,
LogAppendTime topics, the transaction header) is stored as messages, as before.

The gateway runs without the batch cache, so every fetch below reads the store."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import httpx
import kafka_requests
import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from gateway_harness import GatewayThread, RawClient, gateway_thread
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from tmsgate.protocol.columns import decode_columns
from tmsgate.storage import StoredBatch, TopicId

TS = 1_650_000_000_000
N = 300


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with gateway_thread(tmp_path_factory.mktemp("kept"), http=True, fetch_cache_bytes=0) as g:
        yield g


def record(i: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]:
    key = None if i % 4 == 0 else b"key-%d" % i
    value = None if i % 37 == 5 else b"value-%d." % i + bytes([i % 251]) * (i % 300)
    headers = [("n", b"%d" % i), ("empty", b"")] if i % 3 == 0 else []
    return key, value, headers, TS + i


def produce(gw: GatewayThread, topic: str, codec: str, header: tuple | None = None) -> None:
    p = Producer({"bootstrap.servers": gw.bootstrap, "compression.type": codec, "linger.ms": 20})
    for i in range(N):
        key, value, headers, ts = record(i)
        hs = [*headers, header] if header else headers
        p.produce(topic, key=key, value=value, headers=hs or None, timestamp=ts)
    assert p.flush(15) == 0


def stored_kinds(gw: GatewayThread, topic: str) -> set[type]:
    """The kinds of row a fetch's read finds: StoredBatch (kept as sent) or messages."""
    store = gw.broker.store
    res = store.read(TopicId("default", topic), offset=0, max_messages=10_000, kafka_batches=True)
    assert res.next_offset == N
    return {type(r) for r in res.rows}


def by_confluent(gw: GatewayThread, topic: str, start: int = 0) -> list[tuple]:
    c = Consumer(
        {
            "bootstrap.servers": gw.bootstrap,
            "group.id": f"c-{topic}",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 4096,  # many fetches, each from the store
        }
    )
    c.assign([TopicPartition(topic, 0, start)])
    out: list[tuple] = []
    try:
        for _ in range(100):
            if len(out) >= N - start:
                break
            for m in c.consume(500, 1):
                assert m.error() is None, m.error()
                hs = [(k, v) for k, v in m.headers() or []]
                out.append((m.offset(), m.key(), m.value(), hs, m.timestamp()[1]))
    finally:
        c.close()
    return out


def by_kafka_python(gw: GatewayThread, topic: str) -> list[tuple]:
    c = KafkaConsumer(
        bootstrap_servers=gw.bootstrap, consumer_timeout_ms=5000, enable_auto_commit=False
    )
    tp = KpTopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    out = []
    for m in c:
        out.append((m.offset, m.key, m.value, list(m.headers), m.timestamp))
        if len(out) >= N:
            break
    c.close()
    return out


def by_aiokafka(gw: GatewayThread, topic: str) -> list[tuple]:
    async def run() -> list[tuple]:
        c = AIOKafkaConsumer(
            bootstrap_servers=gw.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await c.start()
        try:
            c.assign([__import__("aiokafka").TopicPartition(topic, 0)])
            await c.seek_to_beginning()
            out: list[tuple] = []
            while len(out) < N:
                batches = await asyncio.wait_for(c.getmany(timeout_ms=1000), 10)
                for msgs in batches.values():
                    out += [(m.offset, m.key, m.value, list(m.headers), m.timestamp) for m in msgs]
            return out
        finally:
            await c.stop()

    return asyncio.run(run())


def by_http(gw: GatewayThread, topic: str) -> list[tuple]:
    out: list[tuple] = []
    offset = 0
    with httpx.Client(base_url=gw.http_url) as http:
        while offset < N:
            resp = http.post(
                f"/v1/namespaces/default/topics/{topic}/read",
                json={"offset": offset, "maxRecords": 7},  # pages cut batches anywhere
            )
            assert resp.status_code == 200, resp.text
            cols = decode_columns(resp.content)
            out += list(
                zip(
                    cols.offsets, cols.keys, cols.values, cols.headers, cols.timestamps, strict=True
                )
            )
            offset = cols.next_offset
    return [(o, k, v, list(h), t) for o, k, v, h, t in out]


def expected(start: int = 0) -> list[tuple]:
    return [(i, *record(i)) for i in range(start, N)]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_a_plain_batch_is_kept_as_sent_and_every_reader_gets_its_records(
    gw: GatewayThread, codec: str
) -> None:
    topic = f"kept-{codec}"
    produce(gw, topic, codec)
    assert stored_kinds(gw, topic) == {StoredBatch}
    assert by_confluent(gw, topic) == expected()
    assert by_confluent(gw, topic, 123) == expected(123)  # from inside a batch
    assert by_kafka_python(gw, topic) == expected()
    assert by_aiokafka(gw, topic) == expected()
    assert by_http(gw, topic) == expected()


def test_a_fetch_sends_the_producers_bytes(gw: GatewayThread) -> None:
    """A fetch from the store returns each batch the producer sent, byte for byte after
    the base offset and the leader epoch (Kafka serves its stored batches the same way,
    with its leader's epoch): CRC, producer id, sequences, compression."""
    topic = "kept-bytes"
    sent = [
        kafka_requests.batch([(b"k%d" % i, b"v%d" % i * j, []) for i in range(n)], codec=codec)
        for j, (n, codec) in enumerate([(3, 0), (5, 1), (1, 3), (4, 2)], 1)
    ]
    # librdkafka and kafka-python send leader epoch 0 (outside the CRC)
    sent = [raw[:12] + struct.pack(">i", 0) + raw[16:] for raw in sent]
    client = RawClient(gw.address)
    try:
        bases = []
        for raw in sent:
            resp = client.request(kafka_requests.produce(topic, raw), 8)
            part = kafka_requests.partition(resp)
            assert part.error_code == 0
            bases.append(part.base_offset)
        assert bases == [0, 3, 8, 9]
        got = kafka_requests.partition(client.request(kafka_requests.fetch(topic, 0), 11))
    finally:
        client.close()
    assert got.error_code == 0 and got.high_watermark == 13
    # Base offset and leader epoch replaced (-1, as everywhere); the rest as sent.
    want = b"".join(
        struct.pack(">qii", base, len(raw) - 12, -1) + raw[16:]
        for base, raw in zip(bases, sent, strict=True)
    )
    assert bytes(got.records) == want


@pytest.mark.parametrize(
    "what",
    ["zstd", "log_append_time", "tx_header"],
)
def test_what_does_not_read_back_as_sent_is_stored_as_messages(
    gw: GatewayThread, what: str
) -> None:
    topic = f"messages-{what}"
    header = None
    if what == "log_append_time":
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        new = NewTopic(topic, 1, 1, config={"message.timestamp.type": "LogAppendTime"})
        admin.create_topics([new])[topic].result(10)
    if what == "tx_header":
        # A TMS transaction's header: the records are published under its write pointer
        # and the header is put back by the fetch, not kept in a stored batch.
        with httpx.Client(base_url=gw.http_url) as http:
            resp = http.post("/v1/transactions", json={"timeoutSeconds": 60})
            assert resp.status_code in (200, 201), resp.text
            wp = resp.json()["writePointer"]
        header = ("tms.tx.write_pointer", struct.pack(">q", wp))
    produce(gw, topic, "zstd" if what == "zstd" else "none", header)
    assert StoredBatch not in stored_kinds(gw, topic)
    if what == "zstd":
        assert by_confluent(gw, topic) == expected()
    if what == "log_append_time":
        got = by_confluent(gw, topic)
        assert [g[:4] for g in got] == [e[:4] for e in expected()]
        assert all(g[4] >= TS + N for g in got)  # the broker's time, not the client's
