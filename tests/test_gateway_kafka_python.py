"""kafka-python 3 (producer, consumer, admin) against a live gateway, unchanged."""

from __future__ import annotations

import time
from typing import Any

import pytest
from gateway_harness import GatewayThread, gateway_thread
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import InvalidPartitionsError, KafkaError


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with gateway_thread(tmp_path_factory.mktemp("kp")) as g:
        yield g


def consume(bootstrap: str, topic: str, n: int, **kw: Any) -> list[Any]:
    c = KafkaConsumer(
        bootstrap_servers=bootstrap, consumer_timeout_ms=5000, enable_auto_commit=False, **kw
    )
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    out = []
    for msg in c:
        out.append(msg)
        if len(out) >= n:
            break
    c.close()
    return out


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume_each_codec(gw: GatewayThread, codec: str | None) -> None:
    topic = f"kp-{codec}"
    p = KafkaProducer(bootstrap_servers=gw.bootstrap, compression_type=codec, linger_ms=5)
    futures = [
        p.send(
            topic,
            key=b"k%d" % i if i % 3 else None,
            value=None if i == 7 else b"value-%d" % i * 20,
            headers=[("i", str(i).encode()), ("empty", b"")] if i % 2 else [],
            timestamp_ms=1_600_000_000_000 + i,
        )
        for i in range(50)
    ]
    p.flush()
    assert sorted(f.get(5).offset for f in futures) == list(range(50))
    p.close()
    msgs = consume(gw.bootstrap, topic, 50)
    assert [m.offset for m in msgs] == list(range(50))
    for i, m in enumerate(msgs):
        assert m.key == (b"k%d" % i if i % 3 else None)
        assert m.value == (None if i == 7 else b"value-%d" % i * 20)
        assert list(m.headers) == ([("i", str(i).encode()), ("empty", b"")] if i % 2 else [])
        assert m.timestamp == 1_600_000_000_000 + i


def test_offsets_stay_dense_across_producers(gw: GatewayThread) -> None:
    producers = [KafkaProducer(bootstrap_servers=gw.bootstrap) for _ in range(3)]
    futures = [p.send("kp-dense", b"x") for _ in range(40) for p in producers]
    for p in producers:
        p.flush()
    assert sorted(f.get(5).offset for f in futures) == list(range(120))
    for p in producers:
        p.close()


def test_acks_zero_producer(gw: GatewayThread) -> None:
    p = KafkaProducer(bootstrap_servers=gw.bootstrap, acks=0, enable_idempotence=False)
    for i in range(20):
        p.send("kp-acks0", b"%d" % i)
    p.flush()
    p.close()
    assert [m.value for m in consume(gw.bootstrap, "kp-acks0", 20)] == [
        b"%d" % i for i in range(20)
    ]


def test_offsets_begin_end_and_for_times(gw: GatewayThread) -> None:
    p = KafkaProducer(bootstrap_servers=gw.bootstrap)
    p.send("kp-times", b"early").get(5)
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    p.send("kp-times", b"late").get(5)
    p.close()
    c = KafkaConsumer(bootstrap_servers=gw.bootstrap)
    tp = TopicPartition("kp-times", 0)
    assert c.beginning_offsets([tp]) == {tp: 0}
    assert c.end_offsets([tp]) == {tp: 2}
    found = c.offsets_for_times({tp: cut})[tp]
    assert found.offset == 1 and found.timestamp >= cut
    assert c.offsets_for_times({tp: cut + 3_600_000})[tp] is None
    c.close()


def test_admin_create_describe_alter_delete(gw: GatewayThread) -> None:
    admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap)
    admin.create_topics(
        {
            "kp-admin": {
                "num_partitions": 1,
                "replication_factor": 1,
                "configs": {"retention.ms": "86400000"},
            }
        }
    )
    admin.create_topics({"kp-admin-3": {"num_partitions": 3}})
    assert len(admin.describe_topics(["kp-admin-3"])[0]["partitions"]) == 3
    with pytest.raises(InvalidPartitionsError, match="between 1"):
        admin.create_topics({"kp-admin-0": {"num_partitions": 0}})
    assert "kp-admin" in admin.list_topics()
    res = ConfigResource(ConfigResourceType.TOPIC, "kp-admin")
    described = admin.describe_configs([res], config_filter="all")
    configs = described["topic"]["kp-admin"]
    assert configs["retention.ms"]["value"] == "86400000"
    assert configs["max.message.bytes"]["value"] == "1048588"
    assert configs["message.timestamp.type"]["value"] == "CreateTime"
    admin.alter_configs(
        [
            ConfigResource(
                ConfigResourceType.TOPIC,
                "kp-admin",
                configs={"retention.ms": "-1", "message.timestamp.type": "LogAppendTime"},
            )
        ]
    )
    time.sleep(0.01)
    gw.call(gw.broker.topics.invalidate, "kp-admin")  # no wait for the short topic cache
    configs = admin.describe_configs([res], config_filter="all")["topic"]["kp-admin"]
    assert configs["retention.ms"]["value"] == "-1"
    assert configs["message.timestamp.type"]["value"] == "LogAppendTime"
    admin.delete_topics(["kp-admin"])
    assert "kp-admin" not in admin.list_topics()
    admin.close()


def test_admin_alter_refuses_unknown_config(gw: GatewayThread) -> None:
    admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap)
    admin.create_topics(["kp-badcfg"])
    result = admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, "kp-badcfg", configs={"no.such.config": "1"})],
        raise_on_unknown=False,
    )
    error = str(result["topic"]["kp-badcfg"])
    assert "InvalidConfigurationError" in error and "no.such.config" in error
    result = admin.alter_configs(  # a known config with a value Kafka refuses
        [ConfigResource(ConfigResourceType.TOPIC, "kp-badcfg", configs={"cleanup.policy": "x"})],
        raise_on_unknown=False,
    )
    error = str(result["topic"]["kp-badcfg"])
    assert "InvalidConfigurationError" in error and "String must be one of" in error
    admin.close()


def test_read_committed_consumer_moves_past_rolled_back_offsets(gw: GatewayThread) -> None:
    topic = "kp-rolled"
    p = KafkaProducer(bootstrap_servers=gw.bootstrap)
    p.send(topic, b"a").get(5)
    store = gw.broker.store
    tid = gw.broker.topics.topic_id(topic)
    tx = store.transactions.start(timeout_s=30)
    store.rollback(tid, store.publish(tid, [b"x", b"y", b"z"], tx=tx).rollback)
    store.transactions.abort(tx)
    p.send(topic, b"b").get(5)
    tx = store.transactions.start(timeout_s=30)  # rolled back at the very end, too
    store.rollback(tid, store.publish(tid, [b"q"], tx=tx).rollback)
    store.transactions.abort(tx)
    p.close()
    c = KafkaConsumer(
        bootstrap_servers=gw.bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    values = []
    deadline = time.monotonic() + 10
    while c.position(tp) < 6 and time.monotonic() < deadline:
        for msgs in c.poll(timeout_ms=500).values():
            values += [m.value for m in msgs]
    assert values == [b"a", b"b"]
    assert c.position(tp) == 6
    c.close()


def test_restricted_auto_create(tmp_path: Any) -> None:
    with gateway_thread(tmp_path, auto_create_topics=False) as g:
        p = KafkaProducer(bootstrap_servers=g.bootstrap, max_block_ms=1500)
        with pytest.raises(KafkaError):
            p.send("kp-nope", b"x").get(3)
        p.close(timeout=2)
