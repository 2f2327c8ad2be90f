"""kafka-python 3.x against a live tmsgate gateway.

Producer with its defaults (idempotence on, so InitProducerId first) plus compression;
KafkaConsumer without a group (assign/seek/poll); KafkaAdminClient. Also the tmsgate-specific
specs: partition counts, retention.ms on create, and the tms.tx.write_pointer header.
"""

from __future__ import annotations

import struct
import threading
import time
from types import SimpleNamespace

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
    free_port,
    make_records,
    sleep_past_ms_boundary,
    tiny_value,
    wait_until,
)
from frame_proxy import FrameProxy
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as Errors
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

pytestmark = pytest.mark.timeout(90)


# --------------------------------------------------------------------------- client wrappers


def producer(gateway, codec: str = "none", **kw) -> KafkaProducer:
    cfg = dict(
        bootstrap_servers=gateway.bootstrap,
        compression_type=None if codec == "none" else codec,
        client_id="compat-kafka-python",
        request_timeout_ms=10_000,
        max_block_ms=15_000,
        delivery_timeout_ms=int(PRODUCE_TIMEOUT_S * 1000),
        linger_ms=5,
    )
    cfg.update(kw)
    return KafkaProducer(**cfg)


def consumer(gateway, **kw) -> KafkaConsumer:
    cfg = dict(
        bootstrap_servers=gateway.bootstrap,
        client_id="compat-kafka-python",
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        fetch_max_wait_ms=200,
        request_timeout_ms=10_000,
    )
    cfg.update(kw)
    return KafkaConsumer(**cfg)


def admin_client(gateway) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=gateway.bootstrap,
        client_id="compat-kafka-python-admin",
        request_timeout_ms=int(ADMIN_TIMEOUT_S * 1000),
    )


def send_all(p: KafkaProducer, topic: str, records: list[Rec]) -> list[int]:
    """Send records (in order) and return the offsets the broker assigned."""
    futures = [p.send(topic, key=r.key, value=r.value, headers=list(r.headers)) for r in records]
    p.flush(timeout=PRODUCE_TIMEOUT_S)
    metas = [f.get(timeout=PRODUCE_TIMEOUT_S) for f in futures]
    assert {m.partition for m in metas} <= {0}, f"partitions {[m.partition for m in metas][:10]}"
    return [m.offset for m in metas]


def produce(gateway, topic: str, records: list[Rec], codec: str = "none", **kw) -> list[int]:
    p = producer(gateway, codec, **kw)
    try:
        return send_all(p, topic, records)
    finally:
        p.close(timeout=10)


def consume(gateway, topic: str, n: int, start: int = 0, **kw):
    """assign + seek + poll until n records (or the deadline); returns ConsumerRecords."""
    c = consumer(gateway, **kw)
    tp = TopicPartition(topic, 0)
    out = []
    try:
        c.assign([tp])
        c.seek(tp, start)
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(out) < n and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=300).values():
                out.extend(recs)
    finally:
        c.close()
    assert_no_redelivery([r.offset for r in out], f"kafka-python consumer from {start}")
    assert len(out) >= n, (
        f"consumed {len(out)} of {n} records from offset {start} in {CONSUME_TIMEOUT_S}s"
    )
    return out


def as_recs(records) -> list[Rec]:
    return [Rec(r.key, r.value, tuple((k, v) for k, v in r.headers)) for r in records]


# --------------------------------------------------------------------------- basic produce/consume


@pytest.mark.parametrize("codec", CODECS)
def test_codec_roundtrip(gateway, topic, codec):
    records = make_records(300, codec, size=200)
    offsets = produce(gateway, topic, records, codec)
    assert_dense_offsets(offsets, 0, len(records), "producer offsets")
    got = consume(gateway, topic, len(records))
    assert_dense_offsets([r.offset for r in got], 0, len(records), "consumed offsets")
    assert_same_records(as_recs(got), records)


def test_headers_roundtrip(gateway, topic):
    records = [
        Rec(b"k0", b"no headers", ()),
        Rec(b"k1", b"one", (("a", b"1"),)),
        Rec(
            b"k2", b"repeated key, order kept", (("dup", b"first"), ("dup", b"second"), ("x", b"y"))
        ),
        Rec(b"k3", b"empty header value", (("empty", b""),)),
        Rec(
            b"k4",
            b"binary + unicode",
            (("bin", bytes(range(256))), ("ключ-ü", "значение".encode())),
        ),
        Rec(b"k5", b"many", tuple((f"h{j}", str(j).encode() * 3) for j in range(20))),
    ]
    offsets = produce(gateway, topic, records)
    assert_dense_offsets(offsets, 0, len(records))
    assert_same_records(as_recs(consume(gateway, topic, len(records))), records)


def test_null_key_and_null_value(gateway, topic):
    records = [
        Rec(None, b"null key", (("h", b"1"),)),
        Rec(b"tombstone", None, (("h", b"2"),)),
        Rec(b"", b"empty key", ()),
        Rec(b"empty value", b"", ()),
        Rec(None, b"", ()),
    ]
    offsets = produce(gateway, topic, records)
    assert_dense_offsets(offsets, 0, len(records))
    got = consume(gateway, topic, len(records))
    assert_same_records(as_recs(got), records)
    # None and b"" are different things on the wire (length -1 vs 0)
    assert got[0].key is None and got[2].key == b""
    assert got[1].value is None and got[3].value == b""


def test_order_preserved_many_batches(gateway, topic):
    # small batches + several requests in flight: order must still be the send order
    records = make_records(2000, "order", size=64)
    offsets = produce(gateway, topic, records, "lz4", batch_size=2048, linger_ms=0)
    assert_dense_offsets(offsets, 0, len(records))
    got = consume(gateway, topic, len(records))
    assert_dense_offsets([r.offset for r in got], 0, len(records))
    assert [r.headers[0][1] for r in got] == [str(i).encode() for i in range(len(records))]
    assert_same_records(as_recs(got), records)


def test_offsets_dense_across_producers_and_seek(gateway, topic):
    a = make_records(40, "a")
    b = make_records(60, "b", start=40)
    assert_dense_offsets(produce(gateway, topic, a, "gzip"), 0, 40, "first producer")
    assert_dense_offsets(
        produce(gateway, topic, b, "zstd", enable_idempotence=False), 40, 60, "second producer"
    )
    got = consume(gateway, topic, 70, start=30)
    assert_dense_offsets([r.offset for r in got], 30, 70)
    assert_same_records(as_recs(got), (a + b)[30:])


def test_fetch_at_end_returns_nothing_and_new_data_arrives(gateway, topic):
    produce(gateway, topic, make_records(5, "x"))
    c = consumer(gateway)
    tp = TopicPartition(topic, 0)
    try:
        c.assign([tp])
        c.seek(tp, 5)
        t0 = time.monotonic()
        assert c.poll(timeout_ms=1000) == {}
        assert time.monotonic() - t0 < 10
        produce(gateway, topic, make_records(3, "y", start=5))
        got = []
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(got) < 3 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=300).values():
                got.extend(recs)
        assert_no_redelivery([r.offset for r in got], "consumer at the end while producing")
        assert [r.offset for r in got] == [5, 6, 7]
        assert c.position(tp) == 8
    finally:
        c.close()


def test_read_while_producing(gateway, topic):
    """A consumer that starts 60,000 tiny records behind the head while the producer goes on
    gets every offset once, in order (the gateway's fetch cache once sent a batch's offsets a
    second time, going backwards, when a store read ended inside a cached batch)."""
    total = BEHIND_HEAD + WHILE_READING
    p = producer(gateway, linger_ms=50, batch_size=100_000)
    errors = []

    def more():
        try:
            for i in range(BEHIND_HEAD, total):
                p.send(topic, tiny_value(i))
            p.flush(timeout=PRODUCE_TIMEOUT_S)
        except Exception as exc:
            errors.append(exc)

    try:
        p.send(topic, tiny_value(0)).get(timeout=PRODUCE_TIMEOUT_S)
        for i in range(1, BEHIND_HEAD):
            p.send(topic, tiny_value(i))
        p.flush(timeout=PRODUCE_TIMEOUT_S)
        t = threading.Thread(target=more, daemon=True)
        t.start()
        got = [(r.offset, r.value) for r in consume(gateway, topic, total)]
        t.join(PRODUCE_TIMEOUT_S)
    finally:
        p.close(timeout=10)
    assert not errors, errors
    check_tiny_stream(got, total, "kafka-python consumer while producing")


def test_out_of_range_fetch_resets_to_earliest(gateway, topic):
    records = make_records(10, "oor")
    produce(gateway, topic, records)
    # Seek beyond the end: the broker answers OFFSET_OUT_OF_RANGE and the client resets
    got = consume(gateway, topic, 10, start=1000, auto_offset_reset="earliest")
    assert_dense_offsets([r.offset for r in got], 0, 10)


@pytest.mark.parametrize(
    "api_version", [(0, 11), (1, 0), (2, 0), (2, 4), (2, 8)], ids=lambda v: f"kafka-{v[0]}.{v[1]}"
)
def test_older_protocol_versions(gateway, topic, api_version):
    """Pinning api_version makes kafka-python speak older request versions (e.g. 0.11: Produce v3,
    Fetch v5, Metadata v4, ListOffsets v2); within the gateway's advertised ranges all must work."""
    records = make_records(20, f"old-{api_version[0]}-{api_version[1]}")
    offsets = produce(gateway, topic, records, "gzip", api_version=api_version)
    assert_dense_offsets(offsets, 0, len(records))
    got = consume(gateway, topic, len(records), api_version=api_version)
    assert_same_records(as_recs(got), records)
    tp = TopicPartition(topic, 0)
    c = consumer(gateway, api_version=api_version)
    try:
        assert c.beginning_offsets([tp], timeout_ms=10_000) == {tp: 0}
        assert c.end_offsets([tp], timeout_ms=10_000) == {tp: len(records)}
        found = c.offsets_for_times({tp: 0}, timeout_ms=10_000)[tp]
        assert found is not None and found.offset == 0, found
    finally:
        c.close()


def test_restart_in_the_middle(gateway, topic):
    first = make_records(100, "before", size=150)
    admin = admin_client(gateway)
    try:
        (desc,) = admin.describe_topics([topic])
        topic_id = desc["topic_id"]
    finally:
        admin.close()
    p1 = producer(gateway, "snappy")
    try:
        assert_dense_offsets(send_all(p1, topic, first), 0, 100, "before restart")
        gateway.restart()
        admin = admin_client(gateway)
        try:
            (desc,) = admin.describe_topics([topic])
            assert desc["topic_id"] == topic_id, "Metadata topic id changed across a restart"
        finally:
            admin.close()
        # a fresh producer after the restart
        second = make_records(50, "after-new", start=100)
        assert_dense_offsets(
            produce(gateway, topic, second, "gzip"), 100, 50, "fresh producer after restart"
        )
        # the producer that lived through the restart reconnects and goes on (idempotent)
        third = make_records(50, "after-old", start=150)
        assert_dense_offsets(
            send_all(p1, topic, third), 150, 50, "surviving producer after restart"
        )
    finally:
        p1.close(timeout=10)
    got = consume(gateway, topic, 200)
    assert_dense_offsets([r.offset for r in got], 0, 200)
    assert_same_records(as_recs(got), first + second + third)
    c = consumer(gateway)
    try:
        tp = TopicPartition(topic, 0)
        assert c.beginning_offsets([tp], timeout_ms=10_000) == {tp: 0}
        assert c.end_offsets([tp], timeout_ms=10_000) == {tp: 200}
    finally:
        c.close()


def test_crash_restart_keeps_acked_records(gateway, topic):
    """SIGKILL, no clean shutdown: every record acked with acks=all must still be there."""
    first = make_records(200, "acked", size=100)
    assert_dense_offsets(produce(gateway, topic, first, "zstd"), 0, 200)
    gateway.crash_restart()
    got = consume(gateway, topic, 200)
    assert_dense_offsets([r.offset for r in got], 0, 200)
    assert_same_records(as_recs(got), first)
    second = make_records(10, "after-crash", start=200)
    assert_dense_offsets(produce(gateway, topic, second), 200, 10, "offsets after crash restart")


def test_consumer_lives_through_restart(gateway, topic):
    """An assigned consumer (like a Spark executor's) reconnects and goes on after a restart."""
    first = make_records(50, "a")
    produce(gateway, topic, first)
    c = consumer(gateway)
    tp = TopicPartition(topic, 0)
    got = []
    try:
        c.assign([tp])
        c.seek(tp, 0)
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(got) < 50 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=300).values():
                got.extend(recs)
        assert len(got) == 50
        gateway.restart()
        second = make_records(50, "b", start=50)
        produce(gateway, topic, second)
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while len(got) < 100 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=300).values():
                got.extend(recs)
    finally:
        c.close()
    assert_no_redelivery([r.offset for r in got], "consumer across a restart")
    assert_dense_offsets([r.offset for r in got], 0, 100)
    assert_same_records(as_recs(got), first + second)


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_restart_under_load(gateway, topic, how):
    """Restart (clean or crash) while an idempotent producer has batches in flight: every record
    is acked, none is lost or written twice, order and dense offsets hold, and each acked offset
    points at its record. (A retried batch acked with offset -1 -- DUPLICATE_SEQUENCE_NUMBER --
    is a separate defect pinned down by test_idempotent_retry_gets_original_offset; here such
    acks are only counted.)"""
    n = 20_000
    p = producer(
        gateway,
        "lz4",
        linger_ms=2,
        batch_size=2048,
        request_timeout_ms=5_000,
        delivery_timeout_ms=60_000,
    )
    futures = []
    try:
        for i in range(n):
            futures.append(p.send(topic, key=str(i).encode(), value=b"load-%d" % i))
            if i % 100 == 0:
                time.sleep(0.005)
            if i == n // 4:
                gateway.restart() if how == "sigterm" else gateway.crash_restart()
        p.flush(timeout=60)
        acked = []
        for f in futures:
            acked.append(f.get(timeout=PRODUCE_TIMEOUT_S).offset)
    finally:
        p.close(timeout=10)
    got = consume(gateway, topic, n)
    keys = [int(r.key) for r in got]
    assert len(set(keys)) == len(keys), f"{len(keys) - len(set(keys))} records written twice"
    assert keys == list(range(n)), "records lost or out of order"
    assert_dense_offsets([r.offset for r in got], 0, n)
    wrong = [(i, o) for i, o in enumerate(acked) if o != -1 and o != i]
    assert not wrong, (
        f"acked offsets that do not point at their record (index, offset): {wrong[:5]}"
    )


@pytest.mark.parametrize("between", ["reconnect", "restart", "crash-restart"])
def test_idempotent_retry_gets_original_offset(private_gateway, between):
    """A batch the broker wrote but whose response was lost is retried by the idempotent
    producer -- on a new connection, or after a broker restart (SIGTERM or SIGKILL). Kafka keeps
    the last 5 batches per producer with their offsets and rebuilds them from the log on
    restart, so it answers the duplicate with error NONE and the ORIGINAL base offset: the record
    is not written twice and the client learns its real offset. (Kafka answers
    DUPLICATE_SEQUENCE_NUMBER -- which clients turn into offset -1 -- only for a duplicate older
    than the retained batches.) Checked against Apache Kafka 4.1 for the SIGTERM case."""
    gw_port = free_port()
    proxy = FrameProxy("127.0.0.1", gw_port)
    try:
        via_proxy = f"127.0.0.1:{proxy.port}"
        gw = private_gateway(port=gw_port, extra_args=["--kafka-advertised", via_proxy])
        proxied = SimpleNamespace(bootstrap=via_proxy)
        topic = "retry-after-restart"
        admin = admin_client(proxied)
        try:
            admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
        finally:
            admin.close()
        p = producer(
            proxied,
            enable_idempotence=True,
            linger_ms=0,
            request_timeout_ms=5_000,
            delivery_timeout_ms=30_000,
        )
        try:
            assert_dense_offsets(send_all(p, topic, make_records(5, "warm")), 0, 5)
            proxy.swallow_next_produce = True
            fut = p.send(topic, key=b"retry-me", value=b"written once")
            assert proxy.swallowed.wait(15), "the produce request never got a response to swallow"
            ((_, _, err, base),) = proxy.swallowed_response
            assert (err, base) == (0, 5), f"swallowed response: {proxy.swallowed_response}"
            if between == "reconnect":
                proxy.cut_all()
            elif between == "restart":
                gw.restart()
            else:
                gw.crash_restart()
            meta = fut.get(timeout=PRODUCE_TIMEOUT_S)
        finally:
            p.close(timeout=10)
        # the data side first: written exactly once, at offset 5
        got = consume(proxied, topic, 6)
        assert [r.value for r in got][-1] == b"written once"
        c = consumer(proxied)
        tp = TopicPartition(topic, 0)
        try:
            assert c.end_offsets([tp], timeout_ms=10_000) == {tp: 6}, "the retry was written twice"
        finally:
            c.close()
        # then what the client was told
        assert meta.offset == 5, (
            f"retried batch acked with offset {meta.offset}, expected its original offset 5; "
            f"Produce response to the retry (topic, partition, error, base_offset): "
            f"{proxy.produce_responses[-1]}"
        )
    finally:
        proxy.close()


@pytest.mark.parametrize("acks", [0, 1])
def test_acks_0_and_1(gateway, topic, acks):
    records = make_records(20, f"acks{acks}")
    p = producer(gateway, acks=acks, enable_idempotence=False)
    try:
        futures = [
            p.send(topic, key=r.key, value=r.value, headers=list(r.headers)) for r in records
        ]
        p.flush(timeout=PRODUCE_TIMEOUT_S)
        metas = [f.get(timeout=PRODUCE_TIMEOUT_S) for f in futures]
        if acks == 1:
            assert_dense_offsets([m.offset for m in metas], 0, 20)
        # acks=0: the broker sends no response, the client cannot know offsets
        # the same connection keeps working after acks=0 requests (no stray responses)
        p.send(topic, key=b"last", value=b"last").get(timeout=PRODUCE_TIMEOUT_S)
    finally:
        p.close(timeout=10)
    got = consume(gateway, topic, 21)
    assert_dense_offsets([r.offset for r in got], 0, 21)
    assert_same_records(as_recs(got)[:20], records)


def test_large_record_and_max_message_bytes(gateway, topic):
    big = Rec(b"big", bytes(range(256)) * 3500, (("h", b"1"),))  # 896,000 bytes < max.message.bytes
    assert produce(gateway, topic, [big], "none", max_request_size=3_000_000) == [0]
    # a fetch size limit below one record still makes progress (KIP-74: first batch always returned)
    got = consume(gateway, topic, 1, max_partition_fetch_bytes=1024, fetch_max_bytes=1024)
    assert_same_records(as_recs(got), [big])
    # above the topic's max.message.bytes (default 1048588): MESSAGE_TOO_LARGE
    p = producer(gateway, max_request_size=3_000_000, enable_idempotence=False, retries=0)
    try:
        fut = p.send(topic, value=b"x" * 1_200_000)
        p.flush(timeout=PRODUCE_TIMEOUT_S)
        with pytest.raises(Errors.MessageSizeTooLargeError):
            fut.get(timeout=PRODUCE_TIMEOUT_S)
    finally:
        p.close(timeout=10)
    tp = TopicPartition(topic, 0)
    c = consumer(gateway)
    try:
        assert c.end_offsets([tp], timeout_ms=10_000) == {tp: 1}
    finally:
        c.close()


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_small_fetch_sizes_page_through(gateway, topic, codec):
    """Fetch limits far below the data size: every fetch still returns at least one batch and
    the consumer pages through everything in order."""
    records = make_records(400, f"page-{codec}", size=300)
    produce(gateway, topic, records, codec, batch_size=4096)
    got = consume(gateway, topic, len(records), max_partition_fetch_bytes=600, fetch_max_bytes=600)
    assert_dense_offsets([r.offset for r in got], 0, len(records))
    assert_same_records(as_recs(got), records)


def test_create_time_roundtrip(gateway, topic):
    """Client-set timestamps come back as CreateTime (the default message.timestamp.type)."""
    now = int(time.time() * 1000)
    stamps = [now - 86_400_000, now - 3_600_000, now - 60_000, now]
    p = producer(gateway)
    try:
        futs = [p.send(topic, value=b"t%d" % i, timestamp_ms=ts) for i, ts in enumerate(stamps)]
        p.flush(timeout=PRODUCE_TIMEOUT_S)
        assert [f.get(timeout=PRODUCE_TIMEOUT_S).timestamp for f in futs] == stamps
    finally:
        p.close(timeout=10)
    got = consume(gateway, topic, len(stamps))
    assert [r.timestamp for r in got] == stamps
    assert {r.timestamp_type for r in got} == {0}, "expected CreateTime (0)"


def test_offsets_for_times_uses_record_timestamps(gateway, topic):
    """ListOffsets by timestamp under message.timestamp.type=CreateTime (what the topic reports):
    Kafka answers the first offset whose record timestamp is >= the target, and that record's
    timestamp. Spark's startingOffsetsByTimestamp relies on this for back-dated data."""
    admin = admin_client(gateway)
    try:
        cfg = _topic_configs(admin, topic, ["message.timestamp.type"])
    finally:
        admin.close()
    if cfg.get("message.timestamp.type", {}).get("value") == "LogAppendTime":
        pytest.skip("topic uses LogAppendTime")
    base = int(time.time() * 1000) - 7 * 86_400_000  # a week ago
    stamps = [base, base + 1000, base + 2000, base + 3000]
    p = producer(gateway)
    try:
        futs = [p.send(topic, value=b"t%d" % i, timestamp_ms=ts) for i, ts in enumerate(stamps)]
        p.flush(timeout=PRODUCE_TIMEOUT_S)
        [f.get(timeout=PRODUCE_TIMEOUT_S) for f in futs]
    finally:
        p.close(timeout=10)
    tp = TopicPartition(topic, 0)
    c = consumer(gateway)
    try:

        def lookup(ts):
            r = c.offsets_for_times({tp: ts}, timeout_ms=10_000)[tp]
            return None if r is None else (r.offset, r.timestamp)

        assert lookup(base - 1) == (0, base)
        assert lookup(base + 1500) == (2, base + 2000)
        assert lookup(base + 3000) == (3, base + 3000)
        assert lookup(base + 3001) is None, "no record has a timestamp >= target: Kafka answers -1"
    finally:
        c.close()


# --------------------------------------------------------------------------- list offsets


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_list_offsets(gateway, topic, isolation):
    tp = TopicPartition(topic, 0)
    c = consumer(gateway, isolation_level=isolation)
    try:
        assert c.beginning_offsets([tp], timeout_ms=10_000) == {tp: 0}
        assert c.end_offsets([tp], timeout_ms=10_000) == {tp: 0}
        before = int(time.time() * 1000) - 1
        produce(gateway, topic, make_records(30, "a"))
        ts = sleep_past_ms_boundary()
        produce(gateway, topic, make_records(20, "b", start=30))
        assert c.beginning_offsets([tp], timeout_ms=10_000) == {tp: 0}
        assert c.end_offsets([tp], timeout_ms=10_000) == {tp: 50}
        found = c.offsets_for_times({tp: ts}, timeout_ms=10_000)[tp]
        assert found is not None and found.offset == 30, found
        assert found.timestamp >= ts
        first = c.offsets_for_times({tp: before}, timeout_ms=10_000)[tp]
        assert first is not None and first.offset == 0, first
        # no record at or after a future timestamp: Kafka answers offset -1 -> None
        future = c.offsets_for_times({tp: int(time.time() * 1000) + 3_600_000}, timeout_ms=10_000)[
            tp
        ]
        assert future is None, future
    finally:
        c.close()


# --------------------------------------------------------------------------- admin


def _partitions(desc: dict) -> list[dict]:
    return sorted(desc["partitions"], key=lambda p: p["partition_index"])


def test_admin_create_describe_delete(gateway, topic_name):
    admin = admin_client(gateway)
    try:
        # broker-default partition count and replication (KIP-464: -1/-1)
        admin.create_topics({topic_name: {}})
        admin.wait_for_topics([topic_name], timeout_ms=10_000)
        assert topic_name in admin.list_topics()
        (desc,) = admin.describe_topics([topic_name])
        assert desc["error_code"] == 0 and desc["name"] == topic_name
        parts = _partitions(desc)
        assert [p["partition_index"] for p in parts] == [0], (
            "tmsgate topics have exactly one partition"
        )
        leader = parts[0]["leader_id"]
        assert leader >= 0, parts[0]
        assert leader in parts[0]["replica_nodes"] and leader in parts[0]["isr_nodes"], parts[0]
        assert parts[0]["error_code"] == 0

        with pytest.raises(Errors.TopicAlreadyExistsError):
            admin.create_topics({topic_name: {"num_partitions": 1, "replication_factor": 1}})

        assert_dense_offsets(produce(gateway, topic_name, make_records(5, "g1")), 0, 5)

        old_id = desc["topic_id"]
        assert old_id is not None and str(old_id) != "00000000-0000-0000-0000-000000000000", desc
        admin.delete_topics([topic_name])
        wait_until(
            lambda: topic_name not in admin.list_topics(), 10, "deleted topic to leave list_topics"
        )
        (gone,) = admin.describe_topics([topic_name])
        assert gone["error_code"] == Errors.UnknownTopicOrPartitionError.errno, gone
        with pytest.raises(Errors.UnknownTopicOrPartitionError):
            admin.delete_topics([topic_name])

        # re-created topic starts again at offset 0 with none of the old records
        admin.create_topics({topic_name: {"num_partitions": 1, "replication_factor": 1}})
        admin.wait_for_topics([topic_name], timeout_ms=10_000)
        (desc2,) = admin.describe_topics([topic_name])
        assert desc2["topic_id"] != old_id, "a re-created topic must get a new topic id"
        new = make_records(3, "g2")
        assert_dense_offsets(produce(gateway, topic_name, new), 0, 3, "offsets after re-create")
        assert_same_records(as_recs(consume(gateway, topic_name, 3)), new)
    finally:
        admin.close()


def test_metadata_for_unknown_topic(gateway, topic_name):
    admin = admin_client(gateway)
    try:
        (desc,) = admin.describe_topics([topic_name])
        assert desc["error_code"] == Errors.UnknownTopicOrPartitionError.errno, desc
    finally:
        admin.close()


# --------------------------------------------------------------------------- tmsgate-specific specs


def test_tmsgate_create_topic_with_0_partitions_is_invalid(tmsgate_only, topic_name):
    admin = admin_client(tmsgate_only)
    try:
        with pytest.raises(Errors.InvalidPartitionsError):
            admin.create_topics({topic_name: {"num_partitions": 0, "replication_factor": 1}})
        assert topic_name not in admin.list_topics(), (
            "a refused CreateTopics must not create the topic"
        )
        # validate_only gives the same answer
        with pytest.raises(Errors.InvalidPartitionsError):
            admin.create_topics(
                {topic_name: {"num_partitions": 0, "replication_factor": 1}}, validate_only=True
            )
    finally:
        admin.close()


def _topic_configs(admin: KafkaAdminClient, topic: str, keys=None) -> dict:
    res = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, configs=keys)], config_filter="all"
    )
    return res["topic"][topic]


def test_tmsgate_retention_ms_on_create_shows_in_describe_configs(gateway, topic_name):
    admin = admin_client(gateway)
    try:
        admin.create_topics(
            {
                topic_name: {
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "configs": {"retention.ms": "3600000"},
                }
            }
        )
        configs = _topic_configs(admin, topic_name)
        assert "retention.ms" in configs, sorted(configs)
        assert configs["retention.ms"]["value"] == "3600000", configs["retention.ms"]
        # a topic-level override is a dynamic topic config, not a default
        assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG", configs[
            "retention.ms"
        ]
        # asking for just that key returns just that key
        only = _topic_configs(admin, topic_name, ["retention.ms"])
        assert set(only) == {"retention.ms"} and only["retention.ms"]["value"] == "3600000"
        # modified-only filter (the default) still shows it
        modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name)])
        assert modified["topic"][topic_name]["retention.ms"]["value"] == "3600000"

        # IncrementalAlterConfigs SET
        admin.alter_configs(
            [
                ConfigResource(
                    ConfigResourceType.TOPIC, topic_name, configs={"retention.ms": "7200000"}
                )
            ],
            incremental=True,
        )
        assert _topic_configs(admin, topic_name)["retention.ms"]["value"] == "7200000"
    finally:
        admin.close()


def test_tmsgate_write_pointer_header_not_in_progress_is_refused(tmsgate_only, topic):
    gw = tmsgate_only
    produce(gw, topic, make_records(3, "before"))
    # A Tephra-style write pointer that no transaction ever had (nothing is in progress).
    bogus_wp = int(time.time() * 1000) * 1_000_000 + 4242
    header = ("tms.tx.write_pointer", struct.pack(">Q", bogus_wp))
    p = producer(gw, enable_idempotence=False, retries=0, delivery_timeout_ms=15_000)
    try:
        fut = p.send(topic, key=b"tx", value=b"must be refused", headers=[header])
        p.flush(timeout=PRODUCE_TIMEOUT_S)
        with pytest.raises(Errors.KafkaError) as ei:
            meta = fut.get(timeout=PRODUCE_TIMEOUT_S)
            pytest.fail(
                f"produce with a write pointer not in progress was accepted at offset {meta.offset}"
            )
        assert not isinstance(ei.value, Errors.KafkaTimeoutError), (
            f"expected an error reply from the broker, got a timeout: {ei.value!r}"
        )
    finally:
        p.close(timeout=10)
    # nothing was appended, and the next ordinary record takes the next dense offset
    c = consumer(gw)
    tp = TopicPartition(topic, 0)
    try:
        assert c.end_offsets([tp], timeout_ms=10_000) == {tp: 3}
    finally:
        c.close()
    assert produce(gw, topic, make_records(1, "after", start=3)) == [3]
    got = consume(gw, topic, 4)
    assert [r.value for r in got] == [
        r.value for r in make_records(3, "before") + make_records(1, "after", start=3)
    ]


@pytest.mark.parametrize("bad", [b"", b"\x00\x01", b"123456789"])
def test_tmsgate_write_pointer_header_malformed_is_refused(tmsgate_only, topic, bad):
    p = producer(tmsgate_only, enable_idempotence=False, retries=0, delivery_timeout_ms=15_000)
    try:
        fut = p.send(topic, key=b"tx", value=b"bad header", headers=[("tms.tx.write_pointer", bad)])
        p.flush(timeout=PRODUCE_TIMEOUT_S)
        with pytest.raises(Errors.KafkaError) as ei:
            meta = fut.get(timeout=PRODUCE_TIMEOUT_S)
            pytest.fail(f"malformed write pointer {bad!r} accepted at offset {meta.offset}")
        assert not isinstance(ei.value, Errors.KafkaTimeoutError), repr(ei.value)
    finally:
        p.close(timeout=10)
