"""confluent-kafka (librdkafka 2.16) against a live tmsgate gateway.

Producer (defaults plus compression.type; one test with enable.idempotence), Consumer with
assign() and explicit offsets, AdminClient. confluent-kafka refuses to build a Consumer without
group.id ("group.id must be set"), so the consumer carries a throw-away group.id with
enable.auto.commit=False and never subscribes: it only needs Fetch/ListOffsets. Groups are
tested in tests/test_groups_clients.py.
"""

from __future__ import annotations

import struct
import threading
import time
import uuid

import pytest
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
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

pytestmark = pytest.mark.timeout(90)


def producer(gateway, codec="none", **kw) -> Producer:
    cfg = {
        "bootstrap.servers": gateway.bootstrap,
        "client.id": "compat-confluent",
        "compression.type": codec,
        "linger.ms": 5,
        "message.timeout.ms": int(PRODUCE_TIMEOUT_S * 1000),
        "socket.timeout.ms": 10_000,
    }
    cfg.update(kw)
    return Producer(cfg)


def consumer(gateway, **kw) -> Consumer:
    cfg = {
        "bootstrap.servers": gateway.bootstrap,
        "client.id": "compat-confluent",
        "group.id": f"compat-unused-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "fetch.wait.max.ms": 200,
        "socket.timeout.ms": 10_000,
    }
    cfg.update(kw)
    return Consumer(cfg)


def admin_client(gateway) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": gateway.bootstrap,
            "client.id": "compat-confluent-admin",
            "socket.timeout.ms": 10_000,
        }
    )


def send_all(p: Producer, topic: str, records: list[Rec]) -> list[int]:
    results: dict[int, tuple] = {}

    def cb_for(i):
        def cb(err, msg):
            results[i] = (err, msg.partition(), msg.offset())

        return cb

    for i, r in enumerate(records):
        while True:
            try:
                p.produce(
                    topic,
                    value=r.value,
                    key=r.key,
                    headers=list(r.headers) or None,
                    on_delivery=cb_for(i),
                )
                break
            except BufferError:
                p.poll(0.1)
    remaining = p.flush(PRODUCE_TIMEOUT_S)
    assert remaining == 0, f"{remaining} records not delivered within {PRODUCE_TIMEOUT_S}s"
    errs = [(i, e) for i, (e, _, _) in sorted(results.items()) if e is not None]
    assert not errs, f"delivery errors (first 5): {errs[:5]}"
    assert {part for _, part, _ in results.values()} <= {0}
    return [results[i][2] for i in range(len(records))]


def produce(gateway, topic, records, codec="none", **kw) -> list[int]:
    return send_all(producer(gateway, codec, **kw), topic, records)


def consume(gateway, topic, n, start=0, **kw):
    c = consumer(gateway, **kw)
    out, errors = [], []
    try:
        c.assign([TopicPartition(topic, 0, start)])
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.3)
            if m is None:
                continue
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(m.error())
                    if m.error().fatal() or m.error().code() == KafkaError._AUTO_OFFSET_RESET:
                        break
                continue
            out.append(m)
    finally:
        c.close()
    assert_no_redelivery([m.offset() for m in out], f"confluent-kafka consumer from {start}")
    assert len(out) >= n, (
        f"consumed {len(out)} of {n} records from offset {start}; errors: {errors[:5]}"
    )
    return out


def as_recs(msgs) -> list[Rec]:
    return [Rec(m.key(), m.value(), tuple(m.headers() or ())) for m in msgs]


@pytest.mark.parametrize("codec", CODECS)
def test_codec_roundtrip(gateway, topic, codec):
    records = make_records(300, codec, size=200)
    offsets = produce(gateway, topic, records, codec)
    assert_dense_offsets(offsets, 0, len(records), "producer offsets")
    got = consume(gateway, topic, len(records))
    assert_dense_offsets([m.offset() for m in got], 0, len(records), "consumed offsets")
    assert_same_records(as_recs(got), records)


def test_idempotent_producer(gateway, topic):
    records = make_records(300, "idem")
    offsets = produce(gateway, topic, records, "lz4", **{"enable.idempotence": True})
    assert_dense_offsets(offsets, 0, len(records))
    assert_same_records(as_recs(consume(gateway, topic, len(records))), records)


def test_headers_roundtrip(gateway, topic):
    records = [
        Rec(b"k0", b"none", ()),
        Rec(b"k1", b"dup keys", (("dup", b"1"), ("dup", b"2"))),
        Rec(b"k2", b"empty, null, binary", (("e", b""), ("n", None), ("b", bytes(range(256))))),
        Rec(b"k3", b"unicode", (("ключ", "значение".encode()),)),
    ]
    assert_dense_offsets(produce(gateway, topic, records, "gzip"), 0, len(records))
    assert_same_records(as_recs(consume(gateway, topic, len(records))), records)


def test_null_key_and_null_value(gateway, topic):
    records = [
        Rec(None, b"null key", ()),
        Rec(b"tombstone", None, (("h", b"v"),)),
        Rec(None, None, ()),
        Rec(b"", b"", ()),
    ]
    assert_dense_offsets(produce(gateway, topic, records), 0, len(records))
    got = consume(gateway, topic, len(records))
    assert_same_records(as_recs(got), records)
    assert got[3].key() == b"" and got[3].value() == b""


def test_order_preserved_many_batches(gateway, topic):
    records = make_records(3000, "order", size=64)
    offsets = produce(gateway, topic, records, "zstd", **{"batch.size": 4096, "linger.ms": 0})
    assert_dense_offsets(offsets, 0, len(records))
    got = consume(gateway, topic, len(records))
    assert_dense_offsets([m.offset() for m in got], 0, len(records))
    assert_same_records(as_recs(got), records)


def test_seek_to_middle(gateway, topic):
    records = make_records(50, "mid")
    produce(gateway, topic, records, "snappy")
    got = consume(gateway, topic, 20, start=30)
    assert_dense_offsets([m.offset() for m in got], 30, 20)
    assert_same_records(as_recs(got), records[30:])


def test_read_while_producing(gateway, topic):
    """A consumer that starts 60,000 tiny records behind the head while the producer goes on
    gets every offset once, in order. As the issue reproduced it: linger.ms=50 and
    batch.size=1000000, so librdkafka sends batches of up to 10,000 records, which the gateway
    caches; a store read ending inside one was once followed by the whole batch again."""
    total = BEHIND_HEAD + WHILE_READING
    p = producer(gateway, **{"linger.ms": 50, "batch.size": 1_000_000})

    def send(lo, hi):
        for i in range(lo, hi):
            while True:
                try:
                    p.produce(topic, tiny_value(i))
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(PRODUCE_TIMEOUT_S) == 0

    send(0, 1)
    send(1, BEHIND_HEAD)
    t = threading.Thread(target=send, args=(BEHIND_HEAD, total), daemon=True)
    t.start()
    got = [(m.offset(), m.value()) for m in consume(gateway, topic, total)]
    t.join(PRODUCE_TIMEOUT_S)
    check_tiny_stream(got, total, "confluent-kafka consumer while producing")


def test_restart_in_the_middle(gateway, topic):
    first = make_records(100, "before")
    second = make_records(50, "after-new", start=100)
    third = make_records(50, "after-old", start=150)
    p = producer(gateway, "lz4", **{"enable.idempotence": True})
    assert_dense_offsets(send_all(p, topic, first), 0, 100, "before restart")
    gateway.restart()
    assert_dense_offsets(produce(gateway, topic, second, "gzip"), 100, 50, "fresh producer")
    assert_dense_offsets(send_all(p, topic, third), 150, 50, "surviving producer")
    got = consume(gateway, topic, 200)
    assert_dense_offsets([m.offset() for m in got], 0, 200)
    assert_same_records(as_recs(got), first + second + third)


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_list_offsets_consumer(gateway, topic, isolation):
    c = consumer(gateway, **{"isolation.level": isolation})
    try:
        tp = TopicPartition(topic, 0)
        assert c.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 0)
        produce(gateway, topic, make_records(30, "a"))
        ts = sleep_past_ms_boundary()
        produce(gateway, topic, make_records(20, "b", start=30))
        assert c.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 50)
        (found,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
        assert found.error is None and found.offset == 30, found
        (future,) = c.offsets_for_times(
            [TopicPartition(topic, 0, int(time.time() * 1000) + 3_600_000)], timeout=10
        )
        # Kafka answers -1 (no such record); librdkafka reports it as OFFSET_END (-1)
        assert future.offset == -1, future
    finally:
        c.close()


def _list_offsets(admin, topic, spec, isolation):
    tp = TopicPartition(topic, 0)
    futs = admin.list_offsets(
        {tp: spec}, isolation_level=isolation, request_timeout=ADMIN_TIMEOUT_S
    )
    return futs[tp].result(timeout=ADMIN_TIMEOUT_S)


@pytest.mark.parametrize(
    "isolation", [IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED]
)
def test_list_offsets_admin(gateway, topic, isolation):
    admin = admin_client(gateway)
    assert _list_offsets(admin, topic, OffsetSpec.earliest(), isolation).offset == 0
    assert _list_offsets(admin, topic, OffsetSpec.latest(), isolation).offset == 0
    produce(gateway, topic, make_records(30, "a"))
    ts = sleep_past_ms_boundary()
    produce(gateway, topic, make_records(20, "b", start=30))
    assert _list_offsets(admin, topic, OffsetSpec.earliest(), isolation).offset == 0
    assert _list_offsets(admin, topic, OffsetSpec.latest(), isolation).offset == 50
    found = _list_offsets(admin, topic, OffsetSpec.for_timestamp(ts), isolation)
    assert found.offset == 30 and found.timestamp >= ts, found
    none = _list_offsets(
        admin, topic, OffsetSpec.for_timestamp(int(time.time() * 1000) + 3_600_000), isolation
    )
    assert none.offset == -1, none


def _result(futs: dict, key):
    return futs[key].result(timeout=ADMIN_TIMEOUT_S)


def test_admin_create_describe_delete(gateway, topic_name):
    admin = admin_client(gateway)
    t = topic_name
    _result(
        admin.create_topics(
            [NewTopic(t, num_partitions=1, replication_factor=1)], request_timeout=ADMIN_TIMEOUT_S
        ),
        t,
    )
    md = admin.list_topics(topic=t, timeout=10)
    assert t in md.topics and md.topics[t].error is None, md.topics.get(t)
    assert list(md.topics[t].partitions) == [0]
    assert md.topics[t].partitions[0].leader in md.brokers

    (desc,) = admin.describe_topics(TopicCollection([t]), request_timeout=ADMIN_TIMEOUT_S).values()
    d = desc.result(timeout=ADMIN_TIMEOUT_S)
    assert d.name == t and not d.is_internal
    assert [p.id for p in d.partitions] == [0]
    assert d.partitions[0].leader is not None and d.partitions[0].leader.id in md.brokers

    with pytest.raises(KafkaException) as ei:
        _result(admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1)]), t)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, ei.value

    assert_dense_offsets(produce(gateway, t, make_records(3, "x")), 0, 3)
    _result(admin.delete_topics([t], request_timeout=ADMIN_TIMEOUT_S), t)
    deadline = time.monotonic() + 10
    while t in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "deleted topic still listed after 10 s"
        time.sleep(0.1)
    with pytest.raises(KafkaException) as ei:
        _result(admin.delete_topics([t], request_timeout=ADMIN_TIMEOUT_S), t)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, ei.value


def test_admin_configs(gateway, topic_name):
    admin = admin_client(gateway)
    t = topic_name
    _result(
        admin.create_topics(
            [
                NewTopic(
                    t, num_partitions=1, replication_factor=1, config={"retention.ms": "3600000"}
                )
            ]
        ),
        t,
    )
    res = ConfigResource(ResourceType.TOPIC, t)
    configs = admin.describe_configs([res], request_timeout=ADMIN_TIMEOUT_S)[res].result(
        timeout=ADMIN_TIMEOUT_S
    )
    assert configs["retention.ms"].value == "3600000", configs["retention.ms"]
    assert not configs["retention.ms"].is_default

    alter = ConfigResource(
        ResourceType.TOPIC,
        t,
        incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([alter])[alter].result(timeout=ADMIN_TIMEOUT_S)
    configs = admin.describe_configs([res])[res].result(timeout=ADMIN_TIMEOUT_S)
    assert configs["retention.ms"].value == "7200000", configs["retention.ms"]


def test_tmsgate_create_topic_with_0_partitions_is_invalid(tmsgate_only, topic_name):
    admin = admin_client(tmsgate_only)
    with pytest.raises(KafkaException) as ei:
        _result(
            admin.create_topics([NewTopic(topic_name, num_partitions=0, replication_factor=1)]),
            topic_name,
        )
    assert ei.value.args[0].code() == KafkaError.INVALID_PARTITIONS, ei.value


def test_tmsgate_write_pointer_header_not_in_progress_is_refused(tmsgate_only, topic):
    produce(tmsgate_only, topic, make_records(2, "before"))
    bogus_wp = int(time.time() * 1000) * 1_000_000 + 4242
    p = producer(tmsgate_only, **{"message.timeout.ms": 15_000})
    results = []
    p.produce(
        topic,
        value=b"must be refused",
        headers=[("tms.tx.write_pointer", struct.pack(">Q", bogus_wp))],
        on_delivery=lambda err, msg: results.append((err, msg.offset())),
    )
    assert p.flush(PRODUCE_TIMEOUT_S) == 0
    ((err, offset),) = results
    assert err is not None, (
        f"a write pointer that is not in progress was accepted at offset {offset}"
    )
    assert err.code() != KafkaError._MSG_TIMED_OUT, f"expected a broker error, got {err}"
    c = consumer(tmsgate_only)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False) == (0, 2)
    finally:
        c.close()
