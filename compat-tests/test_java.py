"""The Java client (kafka-clients 3.9.0, what Spark 4.0's Kafka connector runs on) against a
live tmsgate gateway, through compat-tests/java/KafkaCompat.java:

  Producer with its defaults (idempotence on) plus compression.type;
  KafkaConsumer without group.id: assign / seek / poll (read_uncommitted and read_committed);
  AdminClient createTopics, describeTopics, listOffsets(earliest, latest, forTimestamp) with
  IsolationLevel.READ_COMMITTED -- the calls Spark's Kafka source makes -- plus
  describeConfigs, deleteTopics.

The driver is built once per session by compat-tests/java/build.sh; without java/javac or the
jar download the tests fail when CI is set and skip otherwise.
"""

from __future__ import annotations

import time

import pytest
from compat_helpers import (
    CODECS,
    assert_dense_offsets,
    assert_no_redelivery,
    sleep_past_ms_boundary,
)

pytestmark = pytest.mark.timeout(120)

PAD = 150


def padding(i: int, codec: str, size: int = PAD) -> str:
    # mirrors KafkaCompat.padding()
    s = f"v-{i}-{codec}"
    if len(s) < size:
        s += "-"
        unit = f"lorem ipsum dolor sit amet {i % 7} "
        while len(s) < size:
            s += unit
        s = s[:size]
    return s


def expected(
    i: int, codec: str, size: int = PAD, null_key_every=0, null_value_every=0, null_header=False
):
    headers = [["idx", str(i)], ["hk", f"hv-{i}"]]
    if null_header:
        headers.append(["hnull", None])
    return {
        "offset": i,
        "key": None if null_key_every and i % null_key_every == 0 else f"k-{i}",
        "value": None
        if null_value_every and i % null_value_every == 0
        else padding(i, codec, size),
        "headers": headers,
    }


def produce(java, gateway, topic, n, codec, *opts, start=0):
    args = ["produce", gateway.bootstrap, topic, n, codec, "--value-size", PAD, *opts]
    if start:
        args += ["--start", start]
    res = java.run(*args)
    assert [r["i"] for r in res.lines] == list(range(start, start + n)), res.lines[:5]
    assert {r["partition"] for r in res.lines} == {0}
    return [r["offset"] for r in res.lines]


def consume(java, gateway, topic, start, n, *opts, end_offset=None):
    res = java.run("consume", gateway.bootstrap, topic, start, n, *opts)
    *records, end = res.lines
    assert end.get("end") is True, res.lines[-1]
    assert_no_redelivery([r["offset"] for r in records], f"java consumer from {start}")
    assert len(records) == n, f"got {len(records)} of {n}\n{res.stderr[-3000:]}"
    assert end["position"] >= start + n, end
    if end_offset is not None:
        assert end["position"] == end_offset, (
            f"consumer position {end['position']}, expected {end_offset}"
        )
    return records


def check_records(records, exp):
    for i, (got, want) in enumerate(zip(records, exp, strict=False)):
        sub = {k: got[k] for k in want}
        assert sub == want, f"record {i} differs:\n  got      {sub}\n  expected {want}"
    assert len(records) == len(exp)


@pytest.mark.parametrize("codec", CODECS)
def test_codec_roundtrip(java_client, gateway, topic, codec):
    n = 300
    assert_dense_offsets(produce(java_client, gateway, topic, n, codec), 0, n, "producer offsets")
    records = consume(java_client, gateway, topic, 0, n, end_offset=n)
    assert_dense_offsets([r["offset"] for r in records], 0, n, "consumed offsets")
    check_records(records, [expected(i, codec) for i in range(n)])
    assert {r["timestamp_type"] for r in records} <= {"CreateTime", "LogAppendTime"}


def test_headers_nulls_and_read_committed(java_client, gateway, topic):
    n = 12
    opts = ["--null-key-every", "3", "--null-value-every", "4", "--null-header"]
    assert_dense_offsets(produce(java_client, gateway, topic, n, "gzip", *opts), 0, n)
    exp = [
        expected(i, "gzip", null_key_every=3, null_value_every=4, null_header=True)
        for i in range(n)
    ]
    check_records(consume(java_client, gateway, topic, 0, n), exp)
    # Spark reads with isolation.level=read_committed: same records when no transaction is open
    check_records(consume(java_client, gateway, topic, 0, n, "read_committed"), exp)


def test_order_dense_offsets_and_seek(java_client, gateway, topic):
    assert_dense_offsets(
        produce(
            java_client,
            gateway,
            topic,
            2000,
            "lz4",
            "--prop",
            "batch.size=4096",
            "--prop",
            "linger.ms=0",
        ),
        0,
        2000,
    )
    assert_dense_offsets(produce(java_client, gateway, topic, 500, "zstd", start=2000), 2000, 500)
    records = consume(java_client, gateway, topic, 0, 2500)
    assert_dense_offsets([r["offset"] for r in records], 0, 2500)
    assert [r["headers"][0][1] for r in records] == [str(i) for i in range(2500)]
    mid = consume(java_client, gateway, topic, 1990, 20)
    check_records(mid, [expected(i, "lz4" if i < 2000 else "zstd") for i in range(1990, 2010)])


def test_restart_in_the_middle(java_client, gateway, topic):
    assert_dense_offsets(produce(java_client, gateway, topic, 100, "snappy"), 0, 100)
    gateway.restart()
    assert_dense_offsets(produce(java_client, gateway, topic, 50, "snappy", start=100), 100, 50)
    records = consume(java_client, gateway, topic, 0, 150, end_offset=150)
    assert_dense_offsets([r["offset"] for r in records], 0, 150)
    check_records(records, [expected(i, "snappy") for i in range(150)])
    off = java_client.run("offsets", gateway.bootstrap, topic).one
    assert off["earliest"]["offset"] == 0 and off["latest"]["offset"] == 150, off


def test_admin_spark_calls(java_client, gateway, topic_name):
    """createTopics, describeTopics, listOffsets(earliest/latest/forTimestamp) READ_COMMITTED."""
    t = topic_name
    res = java_client.run("admin", gateway.bootstrap, t).one
    assert res["create"].get("ok") is True, res["create"]
    desc = res["describe"]
    assert desc.get("name") == t and desc["internal"] is False, desc
    (p0,) = desc["partitions"]
    assert p0["partition"] == 0 and p0["leader"] is not None, p0
    assert p0["leader"]["id"] in p0["replicas"] and p0["leader"]["id"] in p0["isr"], p0
    assert res["isolation"].upper() == "READ_COMMITTED"
    assert res["earliest"].get("offset") == 0 and res["latest"].get("offset") == 0, res

    produce(java_client, gateway, t, 30, "none")
    ts = sleep_past_ms_boundary()
    produce(java_client, gateway, t, 20, "none", start=30)
    res = java_client.run("admin", gateway.bootstrap, t, "--no-create", "--timestamp", ts).one
    assert res["earliest"].get("offset") == 0, res
    assert res["latest"].get("offset") == 50, res
    assert res["for_timestamp"].get("offset") == 30, res
    assert res["for_timestamp"]["timestamp"] >= ts, res

    future = int(time.time() * 1000) + 3_600_000
    res = java_client.run("offsets", gateway.bootstrap, t, "--timestamp", future).one
    assert res["for_timestamp"].get("offset") == -1, res  # no such record
    res = java_client.run("offsets", gateway.bootstrap, t, "--timestamp", 0, "read_uncommitted").one
    assert res["for_timestamp"].get("offset") == 0 and res["latest"].get("offset") == 50, res


def test_admin_create_exists_delete_list(java_client, gateway, topic_name):
    t = topic_name
    assert java_client.run("create", gateway.bootstrap, t, 1).one == {"ok": True}
    assert t in java_client.run("list", gateway.bootstrap).one["topics"]
    again = java_client.run("create", gateway.bootstrap, t, 1).one
    assert again.get("error", "").endswith("TopicExistsException"), again
    assert java_client.run("delete", gateway.bootstrap, t).one == {"ok": True}
    assert t not in java_client.run("list", gateway.bootstrap).one["topics"]
    gone = java_client.run("delete", gateway.bootstrap, t).one
    assert gone.get("error", "").endswith("UnknownTopicOrPartitionException"), gone


def test_admin_describe_configs(java_client, gateway, topic_name):
    t = topic_name
    assert java_client.run(
        "create", gateway.bootstrap, t, 1, "--config", "retention.ms=3600000"
    ).one == {"ok": True}
    cfg = java_client.run("describe-configs", gateway.bootstrap, t).one["configs"]
    assert cfg["retention.ms"]["value"] == "3600000", cfg.get("retention.ms")
    assert cfg["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG", cfg["retention.ms"]


def test_tmsgate_create_topic_with_0_partitions_is_invalid(java_client, tmsgate_only, topic_name):
    res = java_client.run("create", tmsgate_only.bootstrap, topic_name, 0).one
    assert res.get("error", "").endswith("InvalidPartitionsException"), res


def test_create_time_and_list_offsets_for_back_dated_records(java_client, gateway, topic):
    """Records with explicit (back-dated) CreateTime keep it, and listOffsets(forTimestamp) finds
    them by it -- Spark's startingOffsetsByTimestamp on data that was produced with old stamps."""
    base = int(time.time() * 1000) - 7 * 86_400_000
    for k in range(3):
        produce(java_client, gateway, topic, 5, "none", "--timestamp", base + 1000 * k, start=5 * k)
    records = consume(java_client, gateway, topic, 0, 15, end_offset=15)
    assert [r["timestamp"] for r in records] == [base + 1000 * (i // 5) for i in range(15)]
    assert {r["timestamp_type"] for r in records} == {"CreateTime"}
    res = java_client.run("offsets", gateway.bootstrap, topic, "--timestamp", base + 500).one
    assert res["for_timestamp"].get("offset") == 5, res
    assert res["for_timestamp"].get("timestamp") == base + 1000, res
    res = java_client.run("offsets", gateway.bootstrap, topic, "--timestamp", base + 2001).one
    assert res["for_timestamp"].get("offset") == -1, res


def test_consumer_lives_through_restart(java_client, gateway, topic, tmp_path):
    """A KafkaConsumer (fetch sessions, cached topic ids) keeps reading across a gateway restart,
    as a Spark executor's cached consumer would."""
    assert_dense_offsets(produce(java_client, gateway, topic, 50, "gzip"), 0, 50)
    before = java_client.run("admin", gateway.bootstrap, topic, "--no-create").one["describe"]
    pause = tmp_path / "pause"
    args = (
        "consume",
        gateway.bootstrap,
        topic,
        0,
        100,
        "--pause-after",
        50,
        "--pause-file",
        pause,
        "--timeout-ms",
        60000,
    )
    proc = java_client.start(*args)
    try:
        deadline = time.monotonic() + 40
        while not pause.exists():
            assert proc.poll() is None, f"consumer exited early: {proc.communicate()}"
            assert time.monotonic() < deadline, "consumer did not read the first 50 records in 40 s"
            time.sleep(0.05)
        gateway.restart()
        assert_dense_offsets(produce(java_client, gateway, topic, 50, "gzip", start=50), 50, 50)
        pause.unlink()
        res = java_client.finish(proc, args, timeout=70)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    *records, end = res.lines
    assert end.get("end") is True and end["position"] == 100, end
    assert_no_redelivery([r["offset"] for r in records], "java consumer across a restart")
    assert_dense_offsets([r["offset"] for r in records], 0, 100)
    check_records(records, [expected(i, "gzip") for i in range(100)])
    after = java_client.run("admin", gateway.bootstrap, topic, "--no-create").one["describe"]
    assert after["topic_id"] == before["topic_id"], "topic id must survive a restart"


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_consumer_offsets_lookups(java_client, gateway, topic, isolation):
    """seekToBeginning/seekToEnd + position, beginningOffsets/endOffsets, offsetsForTimes:
    how Spark's KafkaDataConsumer finds the available offset range."""
    opts = ["read_committed"] if isolation == "read_committed" else []
    empty = java_client.run("consumer-offsets", gateway.bootstrap, topic, *opts).one
    assert empty == {"beginning": 0, "end": 0, "beginning_offsets": 0, "end_offsets": 0}, empty
    produce(java_client, gateway, topic, 30, "zstd")
    ts = sleep_past_ms_boundary()
    produce(java_client, gateway, topic, 20, "zstd", start=30)
    res = java_client.run(
        "consumer-offsets", gateway.bootstrap, topic, *opts, "--timestamp", ts
    ).one
    assert (res["beginning"], res["end"], res["beginning_offsets"], res["end_offsets"]) == (
        0,
        50,
        0,
        50,
    ), res
    assert res["for_timestamp"] is not None and res["for_timestamp"]["offset"] == 30, res
    future = int(time.time() * 1000) + 3_600_000
    res = java_client.run(
        "consumer-offsets", gateway.bootstrap, topic, *opts, "--timestamp", future
    ).one
    assert res["for_timestamp"] is None, res
