"""Compacted topics, record deletion and the admin APIs that Kafka's tools and
applications use (Connect, Streams, the web consoles), with confluent-kafka's
AdminClient, producer and consumer and kafka-python's admin client, against a real
gateway (docs/compaction.md, docs/compatibility.md). What Kafka 4.1 answers here was
checked once against a local Kafka 4.1 broker."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)


@pytest.fixture(scope="module")
def fast_cleaner(tmp_path_factory):
    """A gateway whose cleaner runs every 200 ms (Kafka's log.cleaner.backoff.ms)."""
    from conftest import Gateway

    gw = Gateway(
        tmp_path_factory.mktemp("ecosystem"),
        extra_args=["--cleaner-backoff-ms", "200", "--janitor-interval-s", "0.5"],
    )
    gw.start()
    yield gw
    gw.stop()


def _admin(gw) -> AdminClient:
    return AdminClient({"bootstrap.servers": gw.bootstrap})


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(admin: AdminClient, name: str, config: dict[str, str], partitions: int = 1) -> None:
    fs = admin.create_topics([NewTopic(name, partitions, 1, config=config)])
    fs[name].result(10)


def _consume_all(gw, topic: str, end: int) -> list[tuple[int, bytes | None, bytes | None]]:
    c = Consumer(
        {
            "bootstrap.servers": gw.bootstrap,
            "group.id": _name("g"),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                if out and out[-1][0] >= end - 1:
                    break
                _, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
                pos = c.position([TopicPartition(topic, 0)])[0].offset
                if pos >= hi:
                    break
                continue
            if m.error():
                raise KafkaException(m.error())
            out.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out


def test_compacted_topic_keeps_the_latest_value_of_every_key(fast_cleaner) -> None:
    admin = _admin(fast_cleaner)
    topic = _name("compacted")
    _create(
        admin,
        topic,
        {
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "1000",
        },
    )
    p = Producer({"bootstrap.servers": fast_cleaner.bootstrap, "linger.ms": 5})
    latest: dict[bytes, bytes | None] = {}
    for i in range(3000):
        key = b"k%d" % (i % 50)
        value = None if i % 97 == 0 else b"v%d" % i
        p.produce(topic, key=key, value=value)
        latest[key] = value
    assert p.flush(30) == 0
    # A keyless record is refused with INVALID_RECORD, the producer says so per message.
    errors = []
    p.produce(topic, value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD
    deadline = time.monotonic() + 60
    while True:
        got = _consume_all(fast_cleaner, topic, 3000)
        if len(got) <= len(latest) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(offsets) and len(offsets) <= len(latest) + 2
    seen = {k: v for _, k, v in got}
    for key, value in latest.items():
        if value is None:
            assert seen.get(key) is None  # a tombstone, or nothing: never an older value
        else:
            assert seen[key] == value, key
    # offsets never change: the latest value of a key is at the offset it was written
    assert all(int(v[1:]) == o for o, _, v in got if v is not None)
    # the earliest offset still says 0 and the end 3000: only the middle was removed
    c = Consumer({"bootstrap.servers": fast_cleaner.bootstrap, "group.id": _name("w")})
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 3000)
    c.close()


def test_configs_of_kafka_41_accepted_described_and_altered(gateway) -> None:
    admin = _admin(gateway)
    topic = _name("cfg")
    _create(
        admin,
        topic,
        {
            "cleanup.policy": "compact,delete",
            "segment.bytes": "1048576",
            "compression.type": "zstd",
        },
    )
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin.describe_configs([res])[res].result(10)
    assert described["cleanup.policy"].value == "compact,delete"
    assert described["segment.bytes"].value == "1048576"
    assert described["delete.retention.ms"].value == "86400000"  # Kafka's default
    assert described["delete.retention.ms"].is_default
    assert described["min.insync.replicas"].value == "1"
    # Incremental APPEND and SUBTRACT on a list config
    for op, expect in ((AlterConfigOpType.SUBTRACT, "compact"), (AlterConfigOpType.APPEND, None)):
        change = ConfigResource(
            ConfigResource.Type.TOPIC,
            topic,
            incremental_configs=[ConfigEntry("cleanup.policy", "delete", incremental_operation=op)],
        )
        admin.incremental_alter_configs([change])[change].result(10)
        value = admin.describe_configs([res])[res].result(10)["cleanup.policy"].value
        assert value == (expect or "compact,delete")
    for bad in ({"cleanup.policy": "foo"}, {"segment.bytes": "100"}, {"no.such.config": "1"}):
        fs = admin.create_topics([NewTopic(_name("bad"), 1, 1, config=bad)])
        with pytest.raises(KafkaException) as info:
            next(iter(fs.values())).result(10)
        assert info.value.args[0].code() == KafkaError.INVALID_CONFIG, bad


def test_delete_records_moves_the_log_start(gateway) -> None:
    admin = _admin(gateway)
    topic = _name("delrec")
    _create(admin, topic, {})
    p = Producer({"bootstrap.servers": gateway.bootstrap})
    for i in range(100):
        p.produce(topic, value=b"%d" % i)
    assert p.flush(30) == 0
    fs = admin.delete_records([TopicPartition(topic, 0, 25)])
    assert next(iter(fs.values())).result(10).low_watermark == 25
    c = Consumer(
        {
            "bootstrap.servers": gateway.bootstrap,
            "group.id": _name("g"),
            "auto.offset.reset": "earliest",
        }
    )
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (25, 100)
    c.assign([TopicPartition(topic, 0, 10)])  # below the log start: reset to earliest
    m = None
    deadline = time.monotonic() + 20
    while m is None and time.monotonic() < deadline:
        m = c.poll(0.5)
    assert m is not None and not m.error() and m.offset() == 25
    c.close()
    fs = admin.delete_records([TopicPartition(topic, 0, 101)])  # past the high watermark
    with pytest.raises(KafkaException) as info:
        next(iter(fs.values())).result(10)
    assert info.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    fs = admin.delete_records([TopicPartition(topic, 0, -1)])  # -1: the high watermark
    assert next(iter(fs.values())).result(10).low_watermark == 100


def test_cluster_log_dirs_producers_elections_and_features(gateway) -> None:
    from kafka import KafkaAdminClient

    admin = _admin(gateway)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert cluster.cluster_id and len(cluster.nodes) == 1
    assert cluster.controller.id == cluster.nodes[0].id
    topic = _name("admin")
    _create(admin, topic, {}, partitions=2)
    p = Producer({"bootstrap.servers": gateway.bootstrap, "enable.idempotence": True})
    p.produce(topic, value=b"x", partition=1)
    assert p.flush(30) == 0
    from confluent_kafka import ElectionType

    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(10)
    err = elected[TopicPartition(topic, 0)]
    assert err is not None and err.code() == KafkaError.ELECTION_NOT_NEEDED
    kp = KafkaAdminClient(bootstrap_servers=gateway.bootstrap)
    try:
        responses = kp.describe_log_dirs()  # kafka-python 3: one dict per broker
        results = [r for resp in responses for r in resp["log_dirs"]]
        assert len(results) == 1 and results[0]["error_code"] == 0 and results[0]["log_dir"]
        found = {
            (t["name"], part["partition_index"]): part["partition_size"]
            for t in results[0]["topics"]
            for part in t["partitions"]
        }
        assert found[(topic, 1)] > 0 and found[(topic, 0)] == 0
    finally:
        kp.close()
