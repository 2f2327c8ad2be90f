"""confluent-kafka / librdkafka (Produce v10 -> 9, Fetch v16 -> 12) against a live gateway."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from gateway_harness import GatewayThread, gateway_thread


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with gateway_thread(tmp_path_factory.mktemp("ck")) as g:
        yield g


def produce(
    bootstrap: str, topic: str, n: int, ts: int = 1_700_000_000_000, **conf: Any
) -> list[int]:
    offsets: list[int] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for i in range(n):
        p.produce(
            topic,
            key=None if i % 4 == 0 else b"k%d" % i,
            value=None if i == 3 else b"val-%d" % i * 10,
            headers=[("n", b"%d" % i)],
            timestamp=ts + i,
            on_delivery=lambda err, msg: offsets.append(-1 if err else msg.offset()),
        )
    assert p.flush(15) == 0
    return offsets


def consume(bootstrap: str, topic: str, upto: int, **conf: Any) -> tuple[list[Any], int]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "ck-tests",
            "enable.auto.commit": False,
            **conf,
        }
    )
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out = []
    deadline = time.monotonic() + 15
    position = 0
    while time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and not msg.error():
            out.append(msg)
        position = c.position([TopicPartition(topic, 0)])[0].offset
        if position >= upto:
            break
    c.close()
    return out, position


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_codecs_idempotent_headers_nulls(gw: GatewayThread, codec: str) -> None:
    topic = f"ck-{codec}"
    offsets = produce(
        gw.bootstrap, topic, 30, **{"compression.type": codec, "enable.idempotence": True}
    )
    assert sorted(offsets) == list(range(30))
    msgs, _ = consume(gw.bootstrap, topic, 30)
    assert [m.offset() for m in msgs] == list(range(30))
    assert msgs[3].value() is None and msgs[0].key() is None and msgs[1].key() == b"k1"
    assert msgs[2].headers() == [("n", b"2")] and msgs[2].timestamp()[1] == 1_700_000_000_002


def test_offsets_for_times_and_watermarks(gw: GatewayThread) -> None:
    produce(gw.bootstrap, "ck-times", 2, ts=int(time.time() * 1000))
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    produce(gw.bootstrap, "ck-times", 1, ts=int(time.time() * 1000))
    c = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "ck-times"})
    assert c.get_watermark_offsets(TopicPartition("ck-times", 0), timeout=5) == (0, 3)
    [found] = c.offsets_for_times([TopicPartition("ck-times", 0, cut)], timeout=5)
    assert found.offset == 2
    c.close()


def test_admin(gw: GatewayThread) -> None:
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    futures = admin.create_topics(
        [NewTopic("ck-admin", 1, 1, config={"retention.ms": "60000"}), NewTopic("ck-admin-3", 3, 1)]
    )
    futures["ck-admin"].result(10)
    futures["ck-admin-3"].result(10)
    assert len(admin.list_topics("ck-admin-3", timeout=10).topics["ck-admin-3"].partitions) == 3
    with pytest.raises(KafkaException, match="between 1"):
        admin.create_topics([NewTopic("ck-admin-0", 0, 1)])["ck-admin-0"].result(10)
    res = ConfigResource("topic", "ck-admin")
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["retention.ms"].value == "60000"
    assert configs["message.timestamp.type"].value == "CreateTime"
    entry = ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)
    admin.incremental_alter_configs(
        [ConfigResource("topic", "ck-admin", incremental_configs=[entry])]
    )[res].result(10)
    gw.call(gw.broker.topics.invalidate, "ck-admin")
    assert admin.describe_configs([res])[res].result(10)["max.message.bytes"].value == "2000"
    admin.delete_topics(["ck-admin"])["ck-admin"].result(10)
    assert "ck-admin" not in admin.list_topics(timeout=5).topics


def test_read_committed_skips_rolled_back(gw: GatewayThread) -> None:
    topic = "ck-rolled"
    produce(gw.bootstrap, topic, 1)
    store = gw.broker.store
    tid = gw.broker.topics.topic_id(topic)
    tx = store.transactions.start(timeout_s=30)
    store.rollback(tid, store.publish(tid, [b"x", b"y"], tx=tx).rollback)
    store.transactions.abort(tx)
    produce(gw.bootstrap, topic, 1)
    tx = store.transactions.start(timeout_s=30)
    store.rollback(tid, store.publish(tid, [b"z"], tx=tx).rollback)
    store.transactions.abort(tx)
    msgs, position = consume(gw.bootstrap, topic, 5, **{"isolation.level": "read_committed"})
    assert [m.offset() for m in msgs] == [0, 3] and position == 5
