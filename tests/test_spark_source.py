"""The PySpark ``tms`` data source against a live gateway on LevelDB: real Spark (local[2],
one session for all Spark tests), real sockets, records written by Kafka clients and over
HTTP. Batch reads with offsets and timestamps, minPartitions, streaming reads resumed from a
checkpoint, read_committed, batch writes (into a topic the sink has the gateway create, as
Kafka's auto-create does, or is refused with the reason), and options refused before any
task runs."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer
from gateway_harness import GatewayThread, gateway_thread
from tmsgate.protocol import TX_HEADER

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    with gateway_thread(tmp_path_factory.mktemp("spark"), http=True) as g:
        yield g


@pytest.fixture(scope="module")
def http(gw: GatewayThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.http_url, timeout=30) as client:
        yield client


def new_topic(http: httpx.Client, partitions: int = 1) -> str:
    name = f"s-{uuid.uuid4().hex[:10]}"
    props = {"kafka.partitions": str(partitions)} if partitions > 1 else {}
    assert http.put(f"/v1/namespaces/default/topics/{name}", json=props).status_code == 200
    return name


def produce(gw: GatewayThread, topic: str, rows: list[tuple[Any, ...]]) -> None:
    """rows: (partition, key, value, timestamp ms, headers)."""
    producer = Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 5})
    for partition, key, value, ts, headers in rows:
        producer.produce(
            topic, value, key, partition=partition, timestamp=ts or 0, headers=headers or None
        )
    assert producer.flush(20) == 0


def source(spark: Any, gw: GatewayThread, topic: str, **options: str) -> Any:
    reader = spark.read.format("tms").option("url", gw.http_url).option("subscribe", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_batch_read_has_kafka_and_tms_columns(spark, gw, http) -> None:
    topic = new_topic(http, partitions=2)
    produce(
        gw,
        topic,
        [
            (0, b"k0", b"v0", 1_000, [("h", b"1")]),
            (1, None, b"v1", 2_000, []),
            (0, b"k2", None, 3_000, []),
        ],
    )
    df = source(spark, gw, topic)
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
        "messageId",
        "writePointer",
    ]
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    got = [(r.partition, r.offset, r.key, r.value, r.topic, r.timestampType) for r in rows]
    assert got == [
        (0, 0, b"k0", b"v0", topic, 0),
        (0, 1, b"k2", None, topic, 0),
        (1, 0, None, b"v1", topic, 0),
    ]
    assert [int(r.timestamp.timestamp() * 1000) for r in rows] == [1_000, 3_000, 2_000]
    assert [(h.key, h.value) for h in rows[0].headers] == [("h", b"1")]
    assert rows[0].writePointer is None
    polled = http.post(f"/v1/namespaces/default/topics/{topic}/poll", json={}).json()
    assert [m["id"].encode("latin-1") for m in polled] == [rows[0].messageId, rows[1].messageId]


def test_batch_read_between_offsets_and_from_a_time(spark, gw, http) -> None:
    topic = new_topic(http)
    produce(gw, topic, [(0, None, f"v{i}".encode(), 1_000 * (i + 1), []) for i in range(10)])
    df = source(
        spark,
        gw,
        topic,
        startingOffsets=json.dumps({topic: {"0": 3}}),
        endingOffsets=json.dumps({topic: {"0": 7}}),
    )
    assert sorted(r.offset for r in df.collect()) == [3, 4, 5, 6]
    assert df.count() == 4  # a batch read with an end offset reads the same rows again
    from_time = source(spark, gw, topic, startingTimestamp="5500")
    assert sorted(r.offset for r in from_time.collect()) == [5, 6, 7, 8, 9]


def test_min_partitions_splits_one_partition_across_tasks(spark, gw, http) -> None:
    topic = new_topic(http)
    produce(gw, topic, [(0, None, f"v{i}".encode(), None, []) for i in range(1000)])
    df = source(spark, gw, topic, minPartitions="4", maxRecordsPerRead="100")
    assert df.rdd.getNumPartitions() >= 4
    offsets = [r.offset for r in df.select("offset").collect()]
    assert sorted(offsets) == list(range(1000))


def test_read_committed_hides_an_open_transaction(spark, gw, http) -> None:
    topic = new_topic(http)
    wp = http.post("/v1/transactions", json={"timeoutSeconds": 120}).json()["writePointer"]
    # One produce each: a batch's records all join the same transaction, or none does.
    produce(gw, topic, [(0, None, b"before", None, [])])
    produce(gw, topic, [(0, None, b"in-tx", None, [(TX_HEADER, struct.pack(">q", wp))])])
    produce(gw, topic, [(0, None, b"after", None, [])])
    committed = [r.value for r in source(spark, gw, topic).collect()]
    assert committed == [b"before"]  # held at the open transaction, as Kafka's LSO
    dirty = source(spark, gw, topic, isolation="read_uncommitted").collect()
    assert [r.value for r in dirty] == [b"before", b"in-tx", b"after"]
    assert dirty[1].writePointer == wp
    assert http.post(f"/v1/transactions/{wp}/commit").status_code == 200
    assert [r.value for r in source(spark, gw, topic).collect()] == [b"before", b"in-tx", b"after"]


def test_streaming_read_resumes_from_its_checkpoint(spark, gw, http, tmp_path: Path) -> None:
    topic = new_topic(http, partitions=2)
    produce(gw, topic, [(i % 2, None, f"a{i}".encode(), None, []) for i in range(20)])
    seen: list[tuple[int, int, bytes]] = []
    sizes: list[int] = []

    def collect(batch: Any, batch_id: int) -> None:
        rows = batch.collect()
        sizes.append(len(rows))
        seen.extend((r.partition, r.offset, bytes(r.value)) for r in rows)

    def run_once() -> None:
        query = (
            spark.readStream.format("tms")
            .option("url", gw.http_url)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "7")
            .load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None

    run_once()
    assert len(seen) == 20
    assert max(sizes) <= 7 and len(sizes) >= 3  # maxOffsetsPerTrigger
    produce(gw, topic, [(i % 2, None, f"b{i}".encode(), None, []) for i in range(10)])
    run_once()  # a new query on the same checkpoint: only what came since
    assert len(seen) == 30
    assert sorted(seen) == sorted(set(seen))  # nothing twice
    assert {v for _, _, v in seen} == {f"a{i}".encode() for i in range(20)} | {
        f"b{i}".encode() for i in range(10)
    }


def test_batch_write_is_visible_at_once_with_keys_and_headers(spark, gw, http) -> None:
    topic = new_topic(http)
    df = spark.createDataFrame(
        [(f"k{i}", f"value-{i}") for i in range(500)], "key string, value string"
    ).repartition(3)
    df.write.format("tms").option("url", gw.http_url).option("topic", topic).mode("append").save()
    rows = source(spark, gw, topic).collect()
    assert sorted((r.key, r.value) for r in rows) == sorted(
        (f"k{i}".encode(), f"value-{i}".encode()) for i in range(500)
    )
    assert sorted(r.offset for r in rows) == list(range(500))
    assert len({r.writePointer for r in rows}) == 1  # one transaction


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"subscribe": "no-such-topic-anywhere"}, "no-such-topic-anywhere"),
        ({"startingOffsets": "{not json"}, "startingOffsets"),
        ({"isolation": "dirty"}, "isolation"),
        ({"minPartitions": "0"}, "minPartitions"),
    ],
)
def test_bad_options_fail_before_any_task(spark, gw, http, options, words) -> None:
    topic = new_topic(http)
    reader = spark.read.format("tms").option("url", gw.http_url).option("subscribe", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    tracker = spark.sparkContext.statusTracker()
    jobs_before = len(tracker.getJobIdsForGroup())
    with pytest.raises(Exception) as err:
        reader.load().collect()
    assert words in str(err.value)
    assert len(tracker.getJobIdsForGroup()) == jobs_before  # refused on the driver


def kafka_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """``count`` values of ``topic`` as a Kafka consumer reads them (read_committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        while len(values) < count:
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(values)} of {count} records of {topic}"
            if not msg.error():
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_writing_to_a_missing_topic_creates_it_as_kafka_auto_create_does(spark, gw, http) -> None:
    topic = f"made-by-sink-{uuid.uuid4().hex[:8]}"
    df = spark.createDataFrame([(f"v{i}",) for i in range(40)], "value string")
    writer = df.write.format("tms").option("url", gw.http_url).option("topic", topic)
    tracker = spark.sparkContext.statusTracker()
    jobs_before = len(tracker.getJobIdsForGroup())
    with pytest.raises(Exception) as err:
        writer.mode("overwrite").save()
    assert "overwrite" in str(err.value)
    assert len(tracker.getJobIdsForGroup()) == jobs_before  # refused on the driver

    # Two tasks store into the missing topic at once: one creates it, both write.
    df.repartition(2).write.format("tms").option("url", gw.http_url).option("topic", topic).mode(
        "append"
    ).save()
    assert sorted(kafka_values(gw.bootstrap, topic, 40)) == sorted(
        f"v{i}".encode() for i in range(40)
    )
    assert http.get(f"/v1/namespaces/default/topics/{topic}").status_code == 200


def test_a_gateway_without_auto_create_refuses_a_missing_topic_clearly(
    spark, tmp_path: Path
) -> None:
    with gateway_thread(tmp_path, http=True, auto_create_topics=False) as strict:
        df = spark.createDataFrame([("v",)], "value string")
        writer = df.write.format("tms").option("url", strict.http_url).option("topic", "not-made")
        with pytest.raises(Exception) as err:
            writer.mode("append").save()
        assert "cannot write to topic 'not-made' in namespace 'default'" in str(err.value)
        assert "does not auto-create topics" in str(err.value)
        with httpx.Client(base_url=strict.http_url, timeout=30) as client:
            assert client.get("/v1/namespaces/default/topics/not-made").status_code == 404
