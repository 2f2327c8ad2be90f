"""Partitioned topics with real clients against a live tmsgate (docs/compatibility.md,
Partitions; docs/groups.md).

A Kafka topic with N partitions is N TMS topics on the gateway; nothing here knows that. The
clients see an ordinary N-partition topic:

- keyed records land where each client's partitioner sends them and are read back from the
  partition the client was told on delivery, exactly once, in order, at dense offsets from 0
  per partition (kafka-python, aiokafka, confluent-kafka, kcat, the Java client). The default
  partitioners differ: Java, kafka-python and aiokafka hash keys with murmur2, librdkafka
  (confluent-kafka, kcat) with CRC-32 (``consistent_random``); the broker never re-partitions.
- explicit partitions, and Produce / ListOffsets / Fetch of a partition the topic does not
  have (UNKNOWN_TOPIC_OR_PARTITION, sent with kafka-python's low-level connection manager
  because every producer refuses such a partition locally);
- consumer groups of three members sharing 6 partitions (range, roundrobin, sticky and
  cooperative-sticky, whichever each client ships), a member SIGKILLed, its partitions taken
  over after its session timeout, nothing lost, duplicates only from its uncommitted tail;
  the members run in subprocesses of this file (``python test_partitions.py member ...``);
- CreatePartitions (grow, never shrink), configs of a grown topic, and the Java AdminClient
  (compat-tests/java/KafkaPartitions.java, compiled by the ``java_parts`` fixture).

Everything but the retention test also holds against Apache Kafka
(TMSGATE_COMPAT_BOOTSTRAP=host:port).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from compat_helpers import (
    ADMIN_TIMEOUT_S,
    CONSUME_TIMEOUT_S,
    PRODUCE_TIMEOUT_S,
    assert_no_redelivery,
    require_tool,
    unavailable,
    wait_until,
)

pytestmark = pytest.mark.timeout(120)

HERE = Path(__file__).resolve().parent
PARTS = 6
N_KEYS = 40
SESSION_TIMEOUT_MS = 6000  # Kafka's group.min.session.timeout.ms: a killed member leaves fast
UNKNOWN_TOPIC_OR_PARTITION = 3


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Out:
    """A record to produce: index, key, value, and the partition asked for (None: the
    client's partitioner chooses)."""

    i: int
    key: bytes | None
    value: bytes
    asked: int | None = None


@dataclass(frozen=True)
class Sent:
    """A produced record as its delivery report (RecordMetadata, callback) described it."""

    i: int
    key: bytes | None
    value: bytes
    asked: int | None
    partition: int
    offset: int


@dataclass(frozen=True)
class Got:
    """A consumed record."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def keyed(n: int, tag: str, start: int = 0, null_key_every: int = 0) -> list[Out]:
    """Record i: key b"key-<i % N_KEYS>" (None when i % null_key_every == 0), value
    b"v-<i>-<tag>"."""
    return [
        Out(
            i,
            None if null_key_every and i % null_key_every == 0 else b"key-%d" % (i % N_KEYS),
            b"v-%d-%s" % (i, tag.encode()),
        )
        for i in range(start, start + n)
    ]


def explicit(n: int, tag: str, start: int, parts: int) -> list[Out]:
    """Record i goes to partition i % parts, whatever its key."""
    return [
        Out(i, b"explicit-%d" % i, b"v-%d-%s" % (i, tag.encode()), i % parts)
        for i in range(start, start + n)
    ]


def murmur2_partition(key: bytes, parts: int) -> int:
    """Java's (and kafka-python's, aiokafka's, librdkafka's murmur2_random) key hash."""
    from kafka.partitioner.default import murmur2

    return (murmur2(key) & 0x7FFFFFFF) % parts


def crc32_partition(key: bytes, parts: int) -> int:
    """librdkafka's default partitioner (consistent_random) for a non-empty key."""
    return zlib.crc32(key) % parts


PARTITIONERS = {"murmur2": murmur2_partition, "crc32": crc32_partition}


def counts_by_partition(sent: list[Sent]) -> dict[int, int]:
    return dict(Counter(s.partition for s in sent))


def check_read_back(sent: list[Sent], got: list[Got], parts: int, what: str) -> None:
    """Every acknowledged record read back exactly once, from the partition and offset its
    delivery report named, with its key and value; per partition the offsets are dense from
    0 and in send order, and the consumer got them in offset order."""
    assert_no_redelivery([(g.partition, g.offset) for g in got], what)
    at = {(s.partition, s.offset): s for s in sent}
    assert len(at) == len(sent), f"{what}: two records acknowledged at one partition/offset"
    read = {(g.partition, g.offset): g for g in got}
    missing = sorted(k for k in at if k not in read)
    extra = sorted(k for k in read if k not in at)
    assert not missing and not extra, (
        f"{what}: {len(missing)} acknowledged records not read back (partition, offset) "
        f"{missing[:5]}; {len(extra)} read that nobody acknowledged {extra[:5]}"
    )
    wrong = [
        (k, (s.key, s.value), (read[k].key, read[k].value))
        for k, s in at.items()
        if (read[k].key, read[k].value) != (s.key, s.value)
    ]
    assert not wrong, f"{what}: records differ from what was sent at their offset: {wrong[:3]}"
    bad = [s for s in sent if not 0 <= s.partition < parts]
    assert not bad, f"{what}: acknowledged in partitions the topic does not have: {bad[:3]}"
    for p in range(parts):
        mine = sorted((s for s in sent if s.partition == p), key=lambda s: s.offset)
        assert [s.offset for s in mine] == list(range(len(mine))), (
            f"{what}: partition {p} offsets are not dense from 0: {[s.offset for s in mine][:20]}"
        )
        order = [s.i for s in mine]
        assert order == sorted(order), (
            f"{what}: partition {p} does not keep the send order (record index by offset): "
            f"{order[:20]}"
        )


def check_keys(sent: list[Sent], parts: int, partitioner: str | None, what: str) -> None:
    """An explicit partition is kept; a key always lands in one partition, the one the
    client's partitioner computes; the keys spread over every partition."""
    wrong = [s for s in sent if s.asked is not None and s.partition != s.asked]
    assert not wrong, f"{what}: records not in the partition they were sent to: {wrong[:3]}"
    hashed = [s for s in sent if s.asked is None and s.key is not None]
    where: dict[bytes, set[int]] = defaultdict(set)
    for s in hashed:
        where[s.key].add(s.partition)
    split = {k: sorted(v) for k, v in where.items() if len(v) > 1}
    assert not split, f"{what}: keys in more than one partition: {dict(list(split.items())[:3])}"
    if partitioner is not None:
        fn = PARTITIONERS[partitioner]
        off = [
            (s.key, s.partition, fn(s.key, parts))
            for s in hashed
            if s.partition != fn(s.key, parts)
        ]
        assert not off, (
            f"{what}: keys not where the {partitioner} partitioner puts them "
            f"(key, partition, expected): {off[:5]}"
        )
    assert not hashed or {s.partition for s in hashed} == set(range(parts)), (
        f"{what}: {len(where)} keys used only partitions {sorted({s.partition for s in hashed})}"
    )


# --------------------------------------------------------------------------- client operations


class KafkaPythonOps:
    name = "kafka-python"
    partitioner = "murmur2"

    @staticmethod
    def admin(bootstrap):
        from kafka.admin import KafkaAdminClient

        return KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="compat-partitions-kafka-python",
            request_timeout_ms=int(ADMIN_TIMEOUT_S * 1000),
        )

    @classmethod
    def create(cls, bootstrap: str, topic: str, parts: int) -> None:
        admin = cls.admin(bootstrap)
        try:
            admin.create_topics({topic: {"num_partitions": parts, "replication_factor": 1}})
        finally:
            admin.close()

    @staticmethod
    def produce(bootstrap: str, topic: str, records: list[Out]) -> list[Sent]:
        from kafka import KafkaProducer

        p = KafkaProducer(
            bootstrap_servers=bootstrap,
            client_id="compat-partitions-kafka-python",
            linger_ms=5,
            request_timeout_ms=10_000,
            max_block_ms=15_000,
            delivery_timeout_ms=int(PRODUCE_TIMEOUT_S * 1000),
        )
        try:
            futs = [p.send(topic, key=r.key, value=r.value, partition=r.asked) for r in records]
            p.flush(timeout=PRODUCE_TIMEOUT_S)
            metas = [f.get(timeout=PRODUCE_TIMEOUT_S) for f in futs]
        finally:
            p.close(timeout=10)
        return [
            Sent(r.i, r.key, r.value, r.asked, m.partition, m.offset)
            for r, m in zip(records, metas, strict=True)
        ]

    @staticmethod
    def read(bootstrap: str, topic: str, parts: int, total: int) -> tuple[list[Got], dict]:
        """assign every partition from the beginning; the records and each partition's end."""
        from kafka import KafkaConsumer, TopicPartition

        c = KafkaConsumer(
            bootstrap_servers=bootstrap,
            client_id="compat-partitions-kafka-python",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=200,
            request_timeout_ms=10_000,
        )
        tps = [TopicPartition(topic, p) for p in range(parts)]
        got: list[Got] = []
        try:
            c.assign(tps)
            c.seek_to_beginning(*tps)
            deadline = time.monotonic() + CONSUME_TIMEOUT_S
            while len(got) < total and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=300).values():
                    got += [Got(r.partition, r.offset, r.key, r.value) for r in recs]
            ends = {tp.partition: o for tp, o in c.end_offsets(tps, timeout_ms=10_000).items()}
        finally:
            c.close()
        return got, ends


class AiokafkaOps:
    name = "aiokafka"
    partitioner = "murmur2"

    @staticmethod
    def _run(coro):
        return asyncio.run(asyncio.wait_for(coro, 60))

    @classmethod
    def create(cls, bootstrap: str, topic: str, parts: int) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        async def go():
            admin = AIOKafkaAdminClient(
                bootstrap_servers=bootstrap,
                client_id="compat-partitions-aiokafka",
                request_timeout_ms=int(ADMIN_TIMEOUT_S * 1000),
            )
            await admin.start()
            try:
                await admin.create_topics([NewTopic(topic, parts, 1)])
            finally:
                await admin.close()

        cls._run(go())

    @classmethod
    def produce(cls, bootstrap: str, topic: str, records: list[Out]) -> list[Sent]:
        from aiokafka import AIOKafkaProducer

        async def go():
            p = AIOKafkaProducer(
                bootstrap_servers=bootstrap,
                client_id="compat-partitions-aiokafka",
                request_timeout_ms=10_000,
                linger_ms=5,
            )
            await asyncio.wait_for(p.start(), PRODUCE_TIMEOUT_S)
            try:
                futs = [
                    await p.send(topic, key=r.key, value=r.value, partition=r.asked)
                    for r in records
                ]
                return await asyncio.wait_for(asyncio.gather(*futs), PRODUCE_TIMEOUT_S)
            finally:
                await p.stop()

        metas = cls._run(go())
        return [
            Sent(r.i, r.key, r.value, r.asked, m.partition, m.offset)
            for r, m in zip(records, metas, strict=True)
        ]

    @classmethod
    def read(cls, bootstrap: str, topic: str, parts: int, total: int) -> tuple[list[Got], dict]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def go():
            c = AIOKafkaConsumer(
                bootstrap_servers=bootstrap,
                client_id="compat-partitions-aiokafka",
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=200,
                request_timeout_ms=10_000,
            )
            await asyncio.wait_for(c.start(), CONSUME_TIMEOUT_S)
            tps = [TopicPartition(topic, p) for p in range(parts)]
            got: list[Got] = []
            try:
                c.assign(tps)
                await c.seek_to_beginning(*tps)
                deadline = time.monotonic() + CONSUME_TIMEOUT_S
                while len(got) < total and time.monotonic() < deadline:
                    for recs in (await c.getmany(timeout_ms=300)).values():
                        got += [Got(r.partition, r.offset, r.key, r.value) for r in recs]
                ends = {tp.partition: o for tp, o in (await c.end_offsets(tps)).items()}
            finally:
                await c.stop()
            return got, ends

        return cls._run(go())


class ConfluentOps:
    name = "confluent-kafka"
    partitioner = "crc32"

    @staticmethod
    def admin(bootstrap):
        from confluent_kafka.admin import AdminClient

        return AdminClient(
            {
                "bootstrap.servers": bootstrap,
                "client.id": "compat-partitions-confluent",
                "socket.timeout.ms": 10_000,
            }
        )

    @classmethod
    def create(cls, bootstrap: str, topic: str, parts: int, config: dict | None = None) -> None:
        from confluent_kafka.admin import NewTopic

        admin = cls.admin(bootstrap)  # kept referenced until the result is in
        futs = admin.create_topics(
            [NewTopic(topic, num_partitions=parts, replication_factor=1, config=config or {})],
            request_timeout=ADMIN_TIMEOUT_S,
        )
        futs[topic].result(timeout=ADMIN_TIMEOUT_S)

    @staticmethod
    def producer(bootstrap: str):
        from confluent_kafka import Producer

        return Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": "compat-partitions-confluent",
                "linger.ms": 5,
                "message.timeout.ms": int(PRODUCE_TIMEOUT_S * 1000),
                "socket.timeout.ms": 10_000,
            }
        )

    @staticmethod
    def send(p, topic: str, records: list[Out]) -> list[Sent]:
        results: dict[int, tuple] = {}

        def cb_for(k):
            def cb(err, msg):
                results[k] = (err, msg.partition(), msg.offset())

            return cb

        for k, r in enumerate(records):
            kw = {} if r.asked is None else {"partition": r.asked}
            while True:
                try:
                    p.produce(topic, key=r.key, value=r.value, on_delivery=cb_for(k), **kw)
                    break
                except BufferError:
                    p.poll(0.1)
        remaining = p.flush(PRODUCE_TIMEOUT_S)
        assert remaining == 0, f"{remaining} records not delivered within {PRODUCE_TIMEOUT_S}s"
        errs = [(k, e) for k, (e, _, _) in sorted(results.items()) if e is not None]
        assert not errs, f"delivery errors (first 5): {errs[:5]}"
        return [
            Sent(r.i, r.key, r.value, r.asked, results[k][1], results[k][2])
            for k, r in enumerate(records)
        ]

    @classmethod
    def produce(cls, bootstrap: str, topic: str, records: list[Out]) -> list[Sent]:
        return cls.send(cls.producer(bootstrap), topic, records)

    @staticmethod
    def read(bootstrap: str, topic: str, parts: int, total: int) -> tuple[list[Got], dict]:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": "compat-partitions-confluent",
                "group.id": f"compat-unused-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "fetch.wait.max.ms": 200,
                "socket.timeout.ms": 10_000,
            }
        )
        got: list[Got] = []
        errors = []
        try:
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(parts)])
            deadline = time.monotonic() + CONSUME_TIMEOUT_S
            while len(got) < total and time.monotonic() < deadline:
                for m in c.consume(num_messages=500, timeout=0.3):
                    if m.error():
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            errors.append(m.error())
                        continue
                    got.append(Got(m.partition(), m.offset(), m.key(), m.value()))
            ends = {
                p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                for p in range(parts)
            }
        finally:
            c.close()
        assert not errors, f"consumer errors: {errors[:5]}"
        return got, ends


OPS = {o.name: o for o in (KafkaPythonOps, AiokafkaOps, ConfluentOps)}


def read_all(ops, bootstrap: str, topic: str, parts: int, sent: list[Sent]) -> list[Got]:
    got, ends = ops.read(bootstrap, topic, parts, len(sent))
    want = {p: counts_by_partition(sent).get(p, 0) for p in range(parts)}
    assert ends == want, f"{ops.name}: end offsets per partition {ends}, expected {want}"
    return got


# --------------------------------------------------------------------------- 1. keyed records


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent-kafka"])
def test_keyed_records_are_read_back_where_the_client_put_them(gateway, topic_name, client):
    """Two producers send keyed records (every 25th with a null key) to a 6-partition topic
    created with the client's admin client, a third sends to explicit partitions; the client's
    consumer reads every partition from the beginning."""
    ops = OPS[client]
    t = topic_name
    ops.create(gateway.bootstrap, t, PARTS)
    sent = ops.produce(gateway.bootstrap, t, keyed(300, "a", null_key_every=25))
    sent += ops.produce(gateway.bootstrap, t, keyed(300, "b", start=300, null_key_every=25))
    sent += ops.produce(gateway.bootstrap, t, explicit(30, "x", 600, PARTS))
    check_keys(sent, PARTS, ops.partitioner, f"{client} producer")
    got = read_all(ops, gateway.bootstrap, t, PARTS, sent)
    check_read_back(sent, got, PARTS, f"{client} consumer")


# --------------------------------------------------------------------------- 1. kcat


@pytest.fixture(scope="module")
def kcat_bin():
    return require_tool("kcat", "install the Debian package kcat")


def kcat(kcat_bin, gateway, *args, stdin: bytes | None = None, check=True):
    cmd = [kcat_bin, "-b", gateway.bootstrap, "-m", "10", "-X", "socket.timeout.ms=10000", *args]
    try:
        p = subprocess.run(cmd, input=stdin, capture_output=True, timeout=45)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"{shlex.join(cmd)} did not finish within 45s\nstderr: {exc.stderr!r}"
        ) from None
    if check:
        assert p.returncode == 0, (
            f"{shlex.join(cmd)} exited {p.returncode}\n"
            f"stderr: {p.stderr.decode(errors='replace')[-3000:]}"
        )
    return p


_DELIVERED = re.compile(rb"Message delivered to partition (\d+) \(offset (-?\d+)\)")


def kcat_produce(kcat_bin, gateway, topic, records: list[Out], *extra) -> list[tuple[int, int]]:
    """kcat -P -K '\\t' (one record a line); the (partition, offset) of each delivery report
    (-v -v), in the order kcat printed them (per partition in send order)."""
    lines = b"".join(r.key + b"\t" + r.value + b"\n" for r in records)
    p = kcat(
        kcat_bin,
        gateway,
        "-P",
        "-t",
        topic,
        "-K",
        "\t",
        "-v",
        "-v",
        "-X",
        "message.timeout.ms=20000",
        *extra,
        stdin=lines,
    )
    assert b"Delivery failed" not in p.stderr, p.stderr.decode(errors="replace")
    reports = [(int(m[1]), int(m[2])) for m in _DELIVERED.finditer(p.stderr)]
    assert len(reports) == len(records), (
        f"kcat printed {len(reports)} delivery reports for {len(records)} records:\n"
        f"{p.stderr.decode(errors='replace')[-2000:]}"
    )
    return reports


def kcat_consume(kcat_bin, gateway, topic, *extra) -> list[Got]:
    p = kcat(kcat_bin, gateway, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q", *extra)
    out = [json.loads(line) for line in p.stdout.decode().splitlines() if line.strip()]

    def enc(s):
        return None if s is None else s.encode()

    return [Got(m["partition"], m["offset"], enc(m["key"]), enc(m["payload"])) for m in out]


def test_kcat_keyed_and_explicit_partitions(kcat_bin, gateway, topic_name):
    """kcat -P -K (librdkafka's consistent_random: CRC-32 of the key) and -P -p 4; kcat -C of
    the whole topic and of one partition (-p). kcat prints delivery reports per partition,
    not per input line, so they are matched to records by partition and order there."""
    t = topic_name
    KafkaPythonOps.create(gateway.bootstrap, t, PARTS)
    records = keyed(300, "kcat")
    reports = kcat_produce(kcat_bin, gateway, t, records)
    expected = [crc32_partition(r.key, PARTS) for r in records]
    assert Counter(p for p, _ in reports) == Counter(expected), (
        "kcat's deliveries per partition differ from where CRC-32 puts the keys"
    )
    sent = []
    nxt = Counter()  # per partition, offsets follow the input order
    for r, p in zip(records, expected, strict=True):
        sent.append(Sent(r.i, r.key, r.value, None, p, nxt[p]))
        nxt[p] += 1
    assert sorted(reports) == sorted((s.partition, s.offset) for s in sent), reports[:10]

    to4 = [Out(r.i, r.key, r.value, 4) for r in keyed(20, "kcat-p4", start=300)]
    reports4 = kcat_produce(kcat_bin, gateway, t, to4, "-p", "4")
    assert reports4 == [(4, nxt[4] + k) for k in range(20)], reports4
    sent += [Sent(r.i, r.key, r.value, 4, 4, o) for r, (_, o) in zip(to4, reports4, strict=True)]
    check_keys(sent, PARTS, "crc32", "kcat -P")

    got = kcat_consume(kcat_bin, gateway, t)
    check_read_back(sent, got, PARTS, "kcat -C")
    only4 = kcat_consume(kcat_bin, gateway, t, "-p", "4")
    assert [(g.partition, g.offset) for g in only4] == [
        (4, k) for k in range(counts_by_partition(sent)[4])
    ]
    assert [g.value for g in only4] == [
        s.value for s in sorted(sent, key=lambda s: (s.partition, s.offset)) if s.partition == 4
    ]

    # a partition the topic does not have: librdkafka refuses it from the Metadata it got
    p = kcat(kcat_bin, gateway, "-P", "-t", t, "-p", "6", stdin=b"x\n", check=False)
    assert p.returncode != 0 and b"Unknown partition" in p.stderr, p.stderr


# --------------------------------------------------------------------------- 2. explicit / unknown


def _raw_send(admin, request):
    """One request through kafka-python's connection manager (the KafkaAdminClient's), with
    the versions it negotiated; the decoded response."""

    async def go():
        return await admin._manager.send(request)

    return admin._manager.run(go)


def test_explicit_partitions_and_a_partition_the_topic_does_not_have(gateway, topic_name):
    """kafka-python's producer to explicit partitions; then Produce, ListOffsets and Fetch of
    partition 6 of a 6-partition topic on the wire (kafka-python's low-level client: its
    producer, like every other, refuses an unknown partition before sending), which Kafka
    answers UNKNOWN_TOPIC_OR_PARTITION, writing nothing."""
    from confluent_kafka import KafkaError, KafkaException
    from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
    from kafka.protocol.producer import ProduceRequest
    from kafka.record.memory_records import MemoryRecordsBuilder

    t = topic_name
    KafkaPythonOps.create(gateway.bootstrap, t, PARTS)
    sent = KafkaPythonOps.produce(gateway.bootstrap, t, explicit(60, "ex", 0, PARTS))
    check_keys([s for s in sent if s.asked is not None], PARTS, None, "explicit partitions")
    assert counts_by_partition(sent) == {p: 10 for p in range(PARTS)}

    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    b.append(timestamp=None, key=b"k", value=b"raw", headers=[])
    b.close()
    batch = b.buffer()
    Topic = ProduceRequest.TopicProduceData

    def produce(partition: int):
        req = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=10_000,
            topic_data=[
                Topic(
                    name=t,
                    partition_data=[Topic.PartitionProduceData(index=partition, records=batch)],
                )
            ],
            max_version=9,
        )
        ((name, (part,)),) = [
            (x.name, x.partition_responses) for x in _raw_send(admin, req).responses
        ]
        assert (name, part.index) == (t, partition), (name, part)
        return part

    LT = ListOffsetsRequest.ListOffsetsTopic
    FT = FetchRequest.FetchTopic
    admin = KafkaPythonOps.admin(gateway.bootstrap)
    try:
        for partition in (6, 7, 1000):
            r = produce(partition)
            assert (r.error_code, r.base_offset) == (UNKNOWN_TOPIC_OR_PARTITION, -1), r
        (lo,) = _raw_send(
            admin,
            ListOffsetsRequest(
                replica_id=-1,
                isolation_level=0,
                topics=[
                    LT(
                        name=t,
                        partitions=[
                            LT.ListOffsetsPartition(
                                partition_index=6, timestamp=-1, current_leader_epoch=-1
                            )
                        ],
                    )
                ],
                timeout_ms=10_000,
                max_version=7,
            ),
        ).topics
        assert [(x.partition_index, x.error_code) for x in lo.partitions] == [
            (6, UNKNOWN_TOPIC_OR_PARTITION)
        ], lo
        fetched = _raw_send(
            admin,
            FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[
                    FT(
                        topic=t,
                        partitions=[
                            FT.FetchPartition(
                                partition=6,
                                fetch_offset=0,
                                partition_max_bytes=1 << 20,
                                log_start_offset=-1,
                                current_leader_epoch=-1,
                                last_fetched_epoch=-1,
                            )
                        ],
                    )
                ],
                forgotten_topics_data=[],
                rack_id="",
                max_version=12,
            ),
        )
        assert fetched.error_code == 0, fetched
        ((fp,),) = [x.partitions for x in fetched.responses]
        assert (fp.partition_index, fp.error_code) == (6, UNKNOWN_TOPIC_OR_PARTITION), fp
        assert not fp.records, fp
        # the same request shape to partition 5 is written, after the producer's 10 records
        r = produce(5)
        assert (r.error_code, r.base_offset) == (0, 10), r
    finally:
        admin.close()

    # confluent-kafka (librdkafka) knows the count from Metadata and refuses partition 6 itself
    p = ConfluentOps.producer(gateway.bootstrap)
    refused = []
    try:
        p.produce(t, value=b"nowhere", partition=6, on_delivery=lambda err, _: refused.append(err))
        assert p.flush(PRODUCE_TIMEOUT_S) == 0
    except KafkaException as exc:  # raised at once when the producer has the topic's metadata
        refused.append(exc.args[0])
    assert [e.code() for e in refused] == [KafkaError._UNKNOWN_PARTITION], refused

    got, ends = KafkaPythonOps.read(gateway.bootstrap, t, PARTS, 61)
    assert ends == {**{q: 10 for q in range(PARTS)}, 5: 11}, ends
    assert [(g.key, g.value) for g in got if (g.partition, g.offset) == (5, 10)] == [(b"k", b"raw")]


# --------------------------------------------------------------------------- 3. consumer groups
#
# Three members per group, each in another process: one process per test hosts the victim
# of every strategy's group and is SIGKILLed, two more host the first and the second survivor
# of every group. Each member prints one line per poll that returned records:
#   <member> BATCH committed|held|failed <p>:<o>,<p>:<o>,...
# (after its synchronous commit of exactly those records, or without committing once told
# HOLD, or when the commit failed), <member> ASSIGN <p>,<p>,... whenever its assignment
# changes, <member> HOLDING once it stopped committing, <member> CLOSED after a clean close.

GROUP_STRATEGIES = {
    "confluent-kafka": ["range", "roundrobin", "cooperative-sticky"],
    "kafka-python": ["range", "roundrobin", "cooperative-sticky"],
    "aiokafka": ["range", "roundrobin", "sticky"],
}
STICKY = {"sticky", "cooperative-sticky"}


@dataclass
class Member:
    name: str
    assignment: tuple[int, ...] | None = None
    history: list[tuple[int, ...]] = field(default_factory=list)
    batches: list[tuple[str, list[tuple[int, int]]]] = field(default_factory=list)
    holding: bool = False
    closed: bool = False
    errors: list[str] = field(default_factory=list)

    def delivered(self, status: str | None = None) -> list[tuple[int, int]]:
        return [po for st, pos in self.batches if status in (None, st) for po in pos]

    def committed_to(self, p: int) -> int:
        """One past the highest offset of partition p this member committed."""
        return max(
            (o + 1 for st, pos in self.batches if st == "committed" for q, o in pos if q == p),
            default=0,
        )


class Board:
    """What the member processes printed, under one condition variable."""

    def __init__(self):
        self.cond = threading.Condition()
        self.members: dict[str, Member] = {}
        self.procs: list[MemberProc] = []

    def member(self, name: str) -> Member:
        return self.members.setdefault(name, Member(name))

    def feed(self, line: str) -> None:
        parts = line.split()
        if len(parts) < 2:
            return
        with self.cond:
            m = self.member(parts[0])
            kind, rest = parts[1], parts[2:]
            if kind == "ASSIGN":
                m.assignment = tuple(int(x) for x in rest[0].split(",")) if rest else ()
                m.history.append(m.assignment)
            elif kind == "BATCH":
                pos = [tuple(map(int, x.split(":"))) for x in rest[1].split(",")]
                m.batches.append((rest[0], pos))
            elif kind == "HOLDING":
                m.holding = True
            elif kind == "CLOSED":
                m.closed = True
            elif kind == "ERROR":
                m.errors.append(" ".join(rest))
            self.cond.notify_all()

    def summary(self) -> str:
        lines = []
        for m in self.members.values():
            per = Counter(p for p, _ in m.delivered())
            fails = sum(1 for st, _ in m.batches if st == "failed")
            lines.append(
                f"  {m.name}: assignment {m.assignment} (history {m.history[-4:]}), "
                f"delivered per partition {dict(sorted(per.items()))}, failed commits {fails}, "
                f"holding {m.holding}, closed {m.closed}, errors {m.errors[-3:]}"
            )
        for proc in self.procs:
            lines.append(f"  process {proc.label}: rc {proc.proc.poll()}\n{proc.stderr_tail()}")
        return "\n".join(lines)

    def wait(self, pred, timeout: float, what: str):
        def done_or_dead():
            return pred() or any(pr.died_unexpectedly() for pr in self.procs)

        with self.cond:
            self.cond.wait_for(done_or_dead, timeout)
            if pred():
                return
            dead = [pr.label for pr in self.procs if pr.died_unexpectedly()]
            raise AssertionError(
                f"{'member processes ' + str(dead) + ' exited' if dead else 'timed out'} "
                f"waiting {timeout}s for {what}\n{self.summary()}"
            )


class MemberProc:
    """This file as a subprocess hosting some group members (one thread or task each)."""

    def __init__(self, board: Board, tmp_path: Path, label: str, *args):
        self.board = board
        self.label = label
        self.expected_exit = False
        self.eof = False
        self.err_path = tmp_path / f"{label}.stderr"
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "member", *map(str, args)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=str(HERE),
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        board.procs.append(self)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.board.feed(line.strip())
        with self.board.cond:
            self.eof = True
            self.board.cond.notify_all()

    def died_unexpectedly(self) -> bool:
        return self.eof and not self.expected_exit

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            return self.err_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def send(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.expected_exit = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float) -> None:
        """STOP: every member closes its consumer (leaving the group) and the process exits."""
        self.expected_exit = True
        with contextlib.suppress(OSError):  # told already, and gone
            self.send("STOP")
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self.label} did not stop within {timeout}s\n{self.board.summary()}"
            ) from None
        assert rc == 0, f"{self.label} exited {rc}\n{self.stderr_tail()}"


@pytest.fixture
def board():
    b = Board()
    yield b
    for proc in b.procs:
        with contextlib.suppress(Exception):
            proc.kill()


def _describe_groups(bootstrap: str, groups: list[str]) -> dict:
    """{group: (state, {member client id: [partitions]})} by confluent-kafka's AdminClient."""
    admin = ConfluentOps.admin(bootstrap)
    futs = admin.describe_consumer_groups(groups, request_timeout=ADMIN_TIMEOUT_S)
    out = {}
    for g, f in futs.items():
        d = f.result(timeout=ADMIN_TIMEOUT_S)
        out[g] = (
            d.state.name,
            {
                m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
                for m in d.members
            },
        )
    return out


def _committed(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTS)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


@pytest.mark.timeout(150)
@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "aiokafka"])
def test_group_of_three_shares_six_partitions_and_survives_a_killed_member(
    gateway, topic_name, tmp_path, board, client
):
    """For each of the client's assignors (one group each, all on one topic, concurrently):
    three members get two partitions each; they consume and commit batch A; the victim stops
    committing and consumes batch B; it is SIGKILLed (no LeaveGroup) and batch C produced;
    after the session timeout the two survivors own three partitions each (keeping their own
    under sticky assignors) and finish. Every record is consumed, none is consumed again once
    its consumption was committed, and the group's committed offsets end at the end of every
    partition; the records consumed twice are the victim's uncommitted tail (all of it) and
    any in a batch whose commit failed (none, so far)."""
    ops = OPS[client]
    t = topic_name
    strategies = GROUP_STRATEGIES[client]
    group = {s: f"{t}-{s}" for s in strategies}
    victim = {s: f"{s}.victim" for s in strategies}
    survivors = {s: [f"{s}.s1", f"{s}.s2"] for s in strategies}
    ops.create(gateway.bootstrap, t, PARTS)

    spec = lambda s, name: f"{group[s]}/{s}/{name}"  # noqa: E731
    victims = MemberProc(
        board,
        tmp_path,
        "victims",
        client,
        gateway.bootstrap,
        t,
        *[spec(s, victim[s]) for s in strategies],
    )
    # one process per survivor role: aiokafka's StickyPartitionAssignor keeps the member's
    # last assignment in class attributes, so two members of a group must not share one
    others = [
        MemberProc(
            board,
            tmp_path,
            f"survivors-{k}",
            client,
            gateway.bootstrap,
            t,
            *[spec(s, survivors[s][k]) for s in strategies],
        )
        for k in (0, 1)
    ]

    def owners(s):
        return [board.member(n) for n in [victim[s], *survivors[s]]]

    def shared(members, size):
        got = [m.assignment for m in members]
        if any(a is None or len(a) != size for a in got):
            return False
        return sorted(p for a in got for p in a) == list(range(PARTS))

    board.wait(
        lambda: all(shared(owners(s), 2) for s in strategies),
        60,
        "each of the three members of every group to own two of the six partitions",
    )
    with board.cond:
        first = {m.name: m.assignment for s in strategies for m in owners(s)}

    def committed_through(s, ends):
        return all(
            max(m.committed_to(p) for m in owners(s)) >= ends.get(p, 0) for p in range(PARTS)
        )

    sent = ops.produce(gateway.bootstrap, t, keyed(300, "A"))
    ends = counts_by_partition(sent)
    assert set(ends) == set(range(PARTS)), ends
    board.wait(
        lambda: all(committed_through(s, ends) for s in strategies),
        30,
        f"batch A consumed and committed by every group (ends {ends})",
    )

    victims.send("HOLD")
    board.wait(lambda: all(board.member(victim[s]).holding for s in strategies), 20, "HOLDING")
    sent_b = ops.produce(gateway.bootstrap, t, keyed(120, "B", start=300))
    sent += sent_b
    ends = counts_by_partition(sent)
    assert {s.partition for s in sent_b} == set(range(PARTS))

    a_ends = counts_by_partition(sent[: len(sent) - len(sent_b)])

    def victim_has_its_tail(s):
        v = board.member(victim[s])
        seen = Counter(p for p, _ in v.delivered("held"))
        return all(seen[p] >= ends[p] - a_ends[p] for p in v.assignment or ())

    board.wait(
        lambda: all(victim_has_its_tail(s) for s in strategies),
        30,
        "the victims to consume (without committing) batch B of their partitions",
    )
    victims.kill()
    sent += ops.produce(gateway.bootstrap, t, keyed(120, "C", start=420))
    ends = counts_by_partition(sent)

    board.wait(
        lambda: all(shared([board.member(n) for n in survivors[s]], 3) for s in strategies),
        60,
        f"the two survivors of every group to own three partitions each, after the "
        f"victim's session timeout ({SESSION_TIMEOUT_MS} ms)",
    )
    board.wait(
        lambda: all(committed_through(s, ends) for s in strategies),
        30,
        f"every record consumed and committed by every group (ends {ends})",
    )

    def described_as_reported():
        described = _describe_groups(gateway.bootstrap, list(group.values()))
        with board.cond:
            reported = {
                group[s]: (
                    "STABLE",
                    {n: list(board.member(n).assignment or ()) for n in survivors[s]},
                )
                for s in strategies
            }
        assert described == reported, f"DescribeGroups {described}, members say {reported}"
        return True

    wait_until(
        described_as_reported,
        20,
        "DescribeGroups: every group stable, its two members with the partitions they consume",
    )
    with board.cond:
        final = {n: board.member(n).assignment for s in strategies for n in survivors[s]}
    for proc in others:
        proc.expected_exit = True
        proc.send("STOP")  # all at once: leaving members make the others rebalance
    for proc in others:
        proc.stop(30)
    assert all(board.member(n).closed for s in strategies for n in survivors[s])

    produced = {(x.partition, x.offset) for x in sent}
    for s in strategies:
        where = f"[{client} {s}]\n{board.summary()}"
        v = board.member(victim[s])
        surv = [board.member(n) for n in survivors[s]]
        for m in surv:
            assert len(final[m.name]) == 3, where
            if s in STICKY:
                assert set(first[m.name]) <= set(final[m.name]), (
                    f"{m.name} lost partitions under the {s} assignor: "
                    f"{first[m.name]} -> {final[m.name]}\n{where}"
                )
        deliveries = [po for m in [v, *surv] for po in m.delivered()]
        assert set(deliveries) == produced, (
            f"{len(produced - set(deliveries))} records never consumed "
            f"{sorted(produced - set(deliveries))[:5]}, {len(set(deliveries) - produced)} "
            f"consumed that were not produced\n{where}"
        )
        # a record's processing is committed at most once (a batch whose commit failed may
        # be consumed again, or be covered by the member's next commit of that partition)
        committed = Counter(po for m in [v, *surv] for po in m.delivered("committed"))
        again = {po: n for po, n in committed.items() if n > 1}
        assert not again, (
            f"records consumed and committed again after a commit covered them "
            f"{sorted(again)[:5]}\n{where}"
        )
        tail = set(v.delivered("held"))
        failed = {po for m in [v, *surv] for po in m.delivered("failed")}
        twice = {po for po, n in Counter(deliveries).items() if n > 1}
        assert tail, where
        assert tail <= twice, (
            f"the victim's uncommitted tail was not consumed again: "
            f"{sorted(tail - twice)[:5]}\n{where}"
        )
        assert twice <= tail | failed, (
            f"records consumed twice that were committed the first time: "
            f"{sorted(twice - tail - failed)[:5]}\n{where}"
        )
        assert not set(v.delivered("committed")) & twice, where
        for m in surv:
            assert_no_redelivery(m.delivered("committed"), f"{m.name} (committed batches)")
        assert _committed(gateway.bootstrap, t, group[s]) == ends, where


# ---- the member process ----------------------------------------------------------------------


class _Member:
    """One group member's reporting (lines on stdout, shared by the member threads)."""

    lock = threading.Lock()
    hold = threading.Event()
    stop = threading.Event()

    def __init__(self, name: str):
        self.name = name
        self.assignment: tuple[int, ...] | None = None
        self.holding = False

    def say(self, *words) -> None:
        with self.lock:
            sys.stdout.write(" ".join([self.name, *map(str, words)]) + "\n")
            sys.stdout.flush()

    def assigned(self, partitions) -> None:
        a = tuple(sorted(partitions))
        if a != self.assignment:
            self.assignment = a
            self.say("ASSIGN", ",".join(map(str, a)))

    def should_commit(self) -> bool:
        """Called after every poll: False once told HOLD (saying HOLDING the first time)."""
        if self.hold.is_set() and not self.holding:
            self.holding = True
            self.say("HOLDING")
        return not self.holding

    def batch(self, status: str, records: list[tuple[int, int]]) -> None:
        self.say("BATCH", status, ",".join(f"{p}:{o}" for p, o in records))

    @staticmethod
    def next_offsets(records: list[tuple[int, int]]) -> dict[int, int]:
        nxt: dict[int, int] = {}
        for p, o in records:
            nxt[p] = max(nxt.get(p, 0), o + 1)
        return nxt


def _commands() -> None:
    """Commands from the test on stdin; EOF (the test went away) stops the members."""
    for line in sys.stdin:
        if line.strip() == "HOLD":
            _Member.hold.set()
        elif line.strip() == "STOP":
            break
    _Member.stop.set()


def _member_confluent(bootstrap: str, topic: str, group: str, strategy: str, name: str) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    me = _Member(name)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": name,
            "group.id": group,
            "partition.assignment.strategy": strategy,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 500,
            "fetch.wait.max.ms": 200,
        }
    )
    c.subscribe([topic])
    while not _Member.stop.is_set():
        msgs = c.consume(num_messages=200, timeout=0.2)
        me.assigned(tp.partition for tp in c.assignment())
        for m in msgs:
            if m.error() and m.error().code() != KafkaError._PARTITION_EOF:
                me.say("ERROR", m.error())
        recs = [(m.partition(), m.offset()) for m in msgs if not m.error()]
        commit = me.should_commit()
        if not recs:
            continue
        if not commit:
            me.batch("held", recs)
            continue
        offsets = [TopicPartition(topic, p, o) for p, o in me.next_offsets(recs).items()]
        try:
            res = c.commit(offsets=offsets, asynchronous=False)
            bad = [tp for tp in res or [] if tp.error is not None]
            me.batch("failed" if bad else "committed", recs)
        except KafkaException as exc:
            me.say("ERROR", f"commit: {exc}")
            me.batch("failed", recs)
    c.close()
    me.say("CLOSED")


def _member_kafka_python(bootstrap: str, topic: str, group: str, strategy: str, name: str) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    assignor = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }[strategy]
    me = _Member(name)
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id=name,
        group_id=group,
        partition_assignment_strategy=[assignor],
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=500,
        fetch_max_wait_ms=200,
    )
    # Subscribe once the topic's metadata is in. kafka-python 3.0.12 otherwise may elect a
    # leader that assigns before it has the metadata ("No partition metadata for topic"),
    # rejoins for it, and when poll()'s timeout ends during that rejoin, abandons it for good
    # (its own assignment made need_rejoin() false): no assignment applied, no heartbeats,
    # evicted after the session timeout -- seen against Apache Kafka, whose first rebalance
    # does not wait (group.initial.rebalance.delay.ms=0).
    wait_until(
        lambda: len(c.partitions_for_topic(topic) or ()) >= PARTS, 20, f"metadata of {topic}"
    )
    c.subscribe([topic])
    while not _Member.stop.is_set():
        polled = c.poll(timeout_ms=200, max_records=200)
        me.assigned(tp.partition for tp in c.assignment())
        recs = [(r.partition, r.offset) for rs in polled.values() for r in rs]
        commit = me.should_commit()
        if not recs:
            continue
        if not commit:
            me.batch("held", recs)
            continue
        try:
            c.commit(
                {
                    TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                    for p, o in me.next_offsets(recs).items()
                }
            )
            me.batch("committed", recs)
        except Exception as exc:  # CommitFailedError, RebalanceInProgressError, ...
            me.say("ERROR", f"commit: {exc!r}")
            me.batch("failed", recs)
    c.close()
    me.say("CLOSED")


async def _member_aiokafka(bootstrap: str, topic: str, group: str, strategy: str, name: str):
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    assignor = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "sticky": StickyPartitionAssignor,
    }[strategy]
    me = _Member(name)
    c = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        client_id=name,
        group_id=group,
        partition_assignment_strategy=(assignor,),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=500,
        fetch_max_wait_ms=200,
    )
    await c.start()
    while not _Member.stop.is_set():
        polled = await c.getmany(timeout_ms=200, max_records=200)
        me.assigned(tp.partition for tp in c.assignment())
        recs = [(r.partition, r.offset) for rs in polled.values() for r in rs]
        commit = me.should_commit()
        if not recs:
            continue
        if not commit:
            me.batch("held", recs)
            continue
        try:
            await c.commit({TopicPartition(topic, p): o for p, o in me.next_offsets(recs).items()})
            me.batch("committed", recs)
        except Exception as exc:  # CommitFailedError, ...
            me.say("ERROR", f"commit: {exc!r}")
            me.batch("failed", recs)
    await c.stop()
    me.say("CLOSED")


def _member_main(client: str, bootstrap: str, topic: str, *specs: str) -> int:
    """Host the members <group>/<strategy>/<name> until STOP (or SIGKILL)."""
    threading.Thread(target=_commands, daemon=True).start()
    members = [spec.split("/") for spec in specs]
    if client == "aiokafka":

        async def all_members():
            await asyncio.gather(*(_member_aiokafka(bootstrap, topic, *m) for m in members))

        asyncio.run(all_members())
        return 0
    run = {"confluent-kafka": _member_confluent, "kafka-python": _member_kafka_python}[client]
    errors = []

    def guarded(m):
        try:
            run(bootstrap, topic, *m)
        except BaseException as exc:  # reported; the test sees the process exit non-zero
            errors.append(exc)
            print(f"member {m}: {exc!r}", file=sys.stderr, flush=True)
            _Member.stop.set()

    threads = [threading.Thread(target=guarded, args=(m,)) for m in members]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return 1 if errors else 0


# --------------------------------------------------------------------------- 4. CreatePartitions


def _kafka_error(exc_info) -> int:
    return exc_info.value.args[0].code()


def test_create_partitions_grows_a_topic_and_never_shrinks(gateway, topic_name):
    """confluent-kafka AdminClient: 3 partitions with retention.ms, a producer already
    writing, create_partitions to 5: Metadata shows 5, the same producer spreads keys over 5
    (CRC-32 modulo 5) and writes partition 4; shrinking to 3 or "growing" to 5 is
    INVALID_PARTITIONS; the topic's retention.ms is described, altered and described again."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        ResourceType,
    )

    t = topic_name
    admin = ConfluentOps.admin(gateway.bootstrap)
    ConfluentOps.create(gateway.bootstrap, t, 3, {"retention.ms": "3600000"})
    p = ConfluentOps.producer(gateway.bootstrap)
    before = ConfluentOps.send(p, t, keyed(120, "three"))
    check_keys(before, 3, "crc32", "before the grow")

    admin.create_partitions([NewPartitions(t, 5)], request_timeout=ADMIN_TIMEOUT_S)[t].result(
        timeout=ADMIN_TIMEOUT_S
    )

    def partition_ids(client):
        md = client.list_topics(topic=t, timeout=10).topics[t]
        assert md.error is None, md.error
        return sorted(md.partitions)

    wait_until(lambda: partition_ids(admin) == list(range(5)), 15, "Metadata to show 5 partitions")
    # the producer learns the new count from its next Metadata (here: asked for at once)
    wait_until(lambda: partition_ids(p) == list(range(5)), 15, "the producer to see 5 partitions")
    after = ConfluentOps.send(p, t, keyed(200, "five", start=120))
    check_keys(after, 5, "crc32", "after the grow")
    to4 = ConfluentOps.send(
        p, t, [Out(i, b"p4-%d" % i, b"v-%d-p4" % i, 4) for i in range(320, 330)]
    )
    sent = before + after + to4
    got = read_all(ConfluentOps, gateway.bootstrap, t, 5, sent)
    check_read_back(sent, got, 5, "confluent-kafka consumer after the grow")
    assert [g.value for g in got if g.partition == 4][-10:] == [s.value for s in to4]

    for count in (3, 5, 4):
        with pytest.raises(KafkaException) as ei:
            admin.create_partitions([NewPartitions(t, count)], request_timeout=ADMIN_TIMEOUT_S)[
                t
            ].result(timeout=ADMIN_TIMEOUT_S)
        assert _kafka_error(ei) == KafkaError.INVALID_PARTITIONS, (count, ei.value)
    assert partition_ids(admin) == list(range(5))

    res = ConfigResource(ResourceType.TOPIC, t)

    def retention():
        configs = admin.describe_configs([res], request_timeout=ADMIN_TIMEOUT_S)[res].result(
            timeout=ADMIN_TIMEOUT_S
        )
        return configs["retention.ms"]

    r = retention()
    assert (r.value, r.is_default) == ("3600000", False), r
    alter = ConfigResource(
        ResourceType.TOPIC,
        t,
        incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([alter])[alter].result(timeout=ADMIN_TIMEOUT_S)
    assert retention().value == "7200000"


def test_tmsgate_retention_applies_to_every_partition(tmsgate_only, topic_name):
    """retention.ms of a partitioned topic is every partition's TTL: given at creation it
    reaches the partitions a grow adds; altered after a grow it reaches all of them. Records
    older than it are gone from every partition (the log start reaches the end). tmsgate
    only: Kafka deletes whole closed segments, every log.retention.check.interval.ms (5 min)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        ResourceType,
    )

    gw = tmsgate_only
    admin = ConfluentOps.admin(gw.bootstrap)
    inherited, altered = f"{topic_name}-inherit", f"{topic_name}-alter"
    ConfluentOps.create(gw.bootstrap, inherited, 3, {"retention.ms": "1000"})
    ConfluentOps.create(gw.bootstrap, altered, 3, {"retention.ms": "3600000"})
    futs = admin.create_partitions(
        [NewPartitions(inherited, 5), NewPartitions(altered, 5)], request_timeout=ADMIN_TIMEOUT_S
    )
    for f in futs.values():
        f.result(timeout=ADMIN_TIMEOUT_S)
    alter = ConfigResource(
        ResourceType.TOPIC,
        altered,
        incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([alter])[alter].result(timeout=ADMIN_TIMEOUT_S)
    for t in (inherited, altered):
        res = ConfigResource(ResourceType.TOPIC, t)
        cfg = admin.describe_configs([res])[res].result(timeout=ADMIN_TIMEOUT_S)
        assert cfg["retention.ms"].value == "1000", (t, cfg["retention.ms"])
        sent = ConfluentOps.produce(gw.bootstrap, t, explicit(10, "ttl", 0, 5))
        assert counts_by_partition(sent) == {q: 2 for q in range(5)}, t

    c = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": f"unused-{uuid.uuid4().hex[:8]}"})
    try:

        def marks():
            return {
                (t, q): c.get_watermark_offsets(TopicPartition(t, q), timeout=10, cached=False)
                for t in (inherited, altered)
                for q in range(5)
            }

        wait_until(
            lambda: set(marks().values()) == {(2, 2)},
            20,
            "every partition's log start to reach its end once its records are older than 1 s",
        )
    finally:
        c.close()


# --------------------------------------------------------------------------- 5. Java


class JavaPartitions:
    """Runs compat-tests/java/KafkaPartitions (kafka-clients 3.9.0); JSON lines out."""

    def __init__(self, classpath: str):
        self.classpath = classpath

    def run(self, *args, timeout: float = 60.0) -> list[dict]:
        cmd = [
            "java",
            "-Xss1m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            self.classpath,
            "KafkaPartitions",
            *map(str, args),
        ]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(
                f"java KafkaPartitions {shlex.join(map(str, args))} did not finish within "
                f"{timeout}s\n--- stdout ---\n{exc.stdout}\n--- stderr ---\n{exc.stderr}"
            ) from None
        assert p.returncode == 0, (
            f"java KafkaPartitions {shlex.join(map(str, args))} exited {p.returncode}\n"
            f"--- stdout ---\n{p.stdout[-4000:]}\n--- stderr ---\n{p.stderr[-6000:]}"
        )
        return [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]


@pytest.fixture(scope="session")
def java_parts(java_client, tmp_path_factory) -> JavaPartitions:
    """KafkaPartitions.java compiled against the jars build.sh fetched (java_client)."""
    classes = tmp_path_factory.mktemp("java-partitions")
    lib = HERE / "java" / "lib"
    try:
        p = subprocess.run(
            [
                "javac",
                "-nowarn",
                "-encoding",
                "UTF-8",
                "-cp",
                f"{lib}/*",
                "-d",
                str(classes),
                str(HERE / "java" / "KafkaPartitions.java"),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    except subprocess.TimeoutExpired:
        unavailable("javac KafkaPartitions.java did not finish within 180s")
    if p.returncode != 0:
        pytest.fail(f"javac KafkaPartitions.java failed:\n{p.stderr[-4000:]}", pytrace=False)
    return JavaPartitions(f"{classes}:{java_client.classpath}")


def _java_sent(lines: list[dict], asked: int | None = None) -> list[Sent]:
    return [
        Sent(
            x["i"],
            None if x["key"] is None else x["key"].encode(),
            b"v-%d" % x["i"],
            asked,
            x["partition"],
            x["offset"],
        )
        for x in lines
    ]


def test_java_keyed_records_and_a_consumer_group(java_parts, gateway, topic_name):
    """AdminClient createTopics with 6 partitions; the default partitioner (murmur2) for
    keyed records and ProducerRecord partitions for explicit ones; a KafkaConsumer in a group
    gets all six partitions, reads every record from the partition the producer was told,
    and commits per partition what it read."""
    t = topic_name
    created, described = java_parts.run("admin", gateway.bootstrap, t, "create=6", "describe=6")
    assert created == {"step": "create=6", "ok": True}, created
    assert described["partition_ids"] == list(range(PARTS)), described
    for part in described["partitions"]:
        assert part["leader"] is not None and part["leader"] in part["isr"], part

    sent = _java_sent(java_parts.run("produce", gateway.bootstrap, t, 300, N_KEYS))
    sent += _java_sent(
        java_parts.run("produce", gateway.bootstrap, t, 24, 0, "--start", 300, "--partition", 5),
        asked=5,
    )
    check_keys(sent, PARTS, "murmur2", "Java producer")
    ends = counts_by_partition(sent)

    group = f"{t}-group"
    lines = java_parts.run("group-consume", gateway.bootstrap, t, group, len(sent))
    (end,) = [x for x in lines if x.get("end")]
    rest = lines[: lines.index(end)]
    assert end["count"] == len(sent), end
    assert end["assignment"] == list(range(PARTS)), end
    assigned = [x["assigned"] for x in rest if "assigned" in x]
    assert assigned and sorted({p for ps in assigned for p in ps}) == list(range(PARTS)), assigned
    got = [
        Got(
            x["partition"],
            x["offset"],
            None if x["key"] is None else x["key"].encode(),
            x["value"].encode(),
        )
        for x in rest
        if "offset" in x
    ]
    check_read_back(sent, got, PARTS, "Java group consumer")
    assert {int(p): o for p, o in end["committed"].items()} == ends, end
    assert _committed(gateway.bootstrap, t, group) == ends


def test_java_admin_create_grow_describe(java_parts, gateway, topic_name):
    """AdminClient createTopics with 4 partitions, createPartitions to 6 (describeTopics then
    shows 6), to 3 and to 6 again refused (InvalidPartitionsException); the producer writes
    the new partitions, explicitly and by key."""
    t = topic_name
    steps = java_parts.run(
        "admin",
        gateway.bootstrap,
        t,
        "create=4",
        "describe",
        "grow=6",
        "describe=6",
        "grow=3",
        "grow=6",
        "describe",
    )
    by = [(x["step"], x) for x in steps]
    assert [s for s, _ in by] == [
        "create=4",
        "describe",
        "grow=6",
        "describe=6",
        "grow=3",
        "grow=6",
        "describe",
    ]
    assert by[0][1].get("ok") and by[2][1].get("ok"), steps
    assert by[1][1]["partition_ids"] == [0, 1, 2, 3], by[1]
    assert by[3][1]["partition_ids"] == list(range(6)), by[3]
    assert by[6][1]["partition_ids"] == list(range(6)), by[6]
    assert by[1][1]["topic_id"] == by[6][1]["topic_id"], "a grow keeps the topic id"
    for _, refused in by[4:6]:
        assert refused.get("error", "").endswith("InvalidPartitionsException"), refused

    sent = _java_sent(java_parts.run("produce", gateway.bootstrap, t, 120, N_KEYS))
    sent += _java_sent(
        java_parts.run("produce", gateway.bootstrap, t, 6, 0, "--start", 120, "--partition", 5),
        asked=5,
    )
    check_keys(sent, 6, "murmur2", "Java producer after the grow")
    got = read_all(ConfluentOps, gateway.bootstrap, t, 6, sent)
    check_read_back(sent, got, 6, "confluent-kafka consumer of the grown topic")


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    sys.exit({"member": _member_main}[cmd](*rest))
