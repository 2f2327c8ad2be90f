"""Spark benchmark: the ``tms`` data source and sink, a plain consumer, and Spark's Kafka tasks.

    .venv/bin/python bench/spark_bench.py [--rows 300000] [--runs 3] [--kafka host:port]
                                          [--bootstrap host:port --url http://host:port]

Without --bootstrap/--url it starts its own `tmsgate serve` (Kafka and HTTP listeners) on a
temporary LevelDB directory. --kafka names an Apache Kafka broker (the local oracle of
peers-and-ceilings.md) on which the Java range reads run too, side by side.

Measured, each the median of --runs runs, --rows records of 1 KiB on one partition (written
once per broker by confluent-kafka, outside the timing), Spark local[2]:

  tms_read        rows/s of ``spark.read.format("tms")`` into Spark's noop sink, one task
                  (minPartitions unset) and four (minPartitions=4: four offset ranges, two
                  at a time on two cores).
  consumer        rows/s of one confluent-kafka consumer from the gateway: assign, seek to
                  0, poll to the end (the issue's floor for tms_read).
  tms_write       rows/s of ``df.write.format("tms")``: Spark builds the 1 KiB rows, two
                  tasks store them into one transaction, the driver commits it.
  ceiling         rows/s of a Python data source that yields ready Arrow batches in the
                  ``tms`` schema (1 KiB values, no I/O at all) into the noop sink, one task
                  and two: what Spark itself allows a Python data source on this machine.
  java_ranges     rows/s of bench/java/RangeRead.java: what each task of Spark's own
                  ``format("kafka")`` batch read does (kafka-clients 3.9.0: assign, seek to
                  the range start, poll to its end, Spark's executor consumer settings),
                  1 range and 4 ranges in parallel, against the gateway and --kafka. Spark's
                  Kafka connector itself is not on PyPI; this is its per-task client work.

Progress goes to stderr, one JSON summary to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from kafka_clients_bench import JAVA_CP, build_java, free_port, stop, wait_for_port  # noqa: E402

VALUE = b"v" * 1024


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def serve_command(store_dir: str, kafka_port: int, http_port: int | None) -> list[str]:
    """`tmsgate serve` on a LevelDB store, its Kafka listener, and HTTP (or none)."""
    http = ["--http-listen", f"127.0.0.1:{http_port}"] if http_port else ["--no-http"]
    return [
        str(Path(sys.executable).with_name("tmsgate")),
        "serve",
        "--store",
        f"leveldb://{store_dir}",
        "--kafka-listen",
        f"127.0.0.1:{kafka_port}",
        *http,
        "--log-level",
        "WARNING",
    ]


@contextlib.contextmanager
def own_gateway() -> Iterator[tuple[str, str]]:
    with tempfile.TemporaryDirectory(prefix="tmsgate-spark-bench-") as workdir:
        kafka_port, http_port = free_port(), free_port()
        cmd = serve_command(f"{workdir}/store", kafka_port, http_port)
        proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(proc, ("127.0.0.1", kafka_port))
            wait_for_port(proc, ("127.0.0.1", http_port))
            yield f"127.0.0.1:{kafka_port}", f"http://127.0.0.1:{http_port}"
        finally:
            stop(proc)


def fill(bootstrap: str, rows: int) -> str:
    topic = f"spark-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        fut.result(30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1_000_000, "acks": "all"}
    )
    for i in range(rows):
        while True:
            try:
                producer.produce(topic, VALUE, str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    log(f"{bootstrap}: {rows} rows in {topic}")
    return topic


def timed(rows: int, run: Callable[[], int]) -> float:
    started = time.perf_counter()
    got = run()
    seconds = time.perf_counter() - started
    assert got == rows, f"read {got} of {rows}"
    return rows / seconds


def consume(bootstrap: str, topic: str, rows: int) -> int:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    n = 0
    while n < rows:
        n += sum(1 for m in c.consume(10_000, 5) if not m.error())
    c.close()
    return n


def java_ranges(bootstrap: str, topic: str, rows: int, ranges: int) -> float:
    out = subprocess.run(
        ["java", "-cp", JAVA_CP, "RangeRead", bootstrap, topic, str(rows), str(ranges)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["rows"] == rows, doc
    return float(doc["rows_per_s"])


def write(df: object, url: str, topic: str, http: httpx.Client) -> int:
    df.write.format("tms").option("url", url).option("topic", topic).mode("append").save()  # type: ignore[attr-defined]
    return int(http.get(f"/v1/namespaces/default/topics/{topic}/offsets").json()["latest"])


def ceiling_source() -> type:
    """A Python data source with nothing to read: each task yields one prebuilt Arrow
    batch of the ``tms`` schema over and over (options ``rows``, ``tasks``)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class CeilingReader(DataSourceReader):
        def __init__(self, rows: int, tasks: int) -> None:
            self.rows, self.tasks = rows, tasks

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(self.tasks)]

        def read(self, partition: InputPartition) -> Iterator[object]:
            import pyarrow as pa
            from tmsgate.pipelines.spark.arrow import SCHEMA

            n = 10_000
            columns = [
                pa.nulls(n, pa.binary()),
                pa.array([VALUE] * n, pa.binary()),
                pa.array(["t"] * n, pa.string()),
                pa.array([0] * n, pa.int32()),
                pa.array(range(n), pa.int64()),
                pa.array([0] * n, pa.timestamp("us", tz="UTC")),
                pa.array([0] * n, pa.int32()),
                pa.array([[]] * n, SCHEMA.field("headers").type),
                pa.array([bytes(20)] * n, pa.binary()),
                pa.nulls(n, pa.int64()),
            ]
            batch = pa.RecordBatch.from_arrays(columns, schema=SCHEMA)
            for _ in range(self.rows // self.tasks // n):
                yield batch

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "tms_ceiling"

        def schema(self) -> str:
            from tmsgate.pipelines.spark.arrow import SPARK_SCHEMA

            return SPARK_SCHEMA

        def reader(self, schema: object) -> DataSourceReader:
            return CeilingReader(int(self.options["rows"]), int(self.options["tasks"]))

    return Ceiling


def median(samples: list[float]) -> dict[str, object]:
    return {"median": round(statistics.median(samples)), "runs": [round(s) for s in samples]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bootstrap", help="a running gateway's Kafka listener (with --url)")
    ap.add_argument("--url", help="a running gateway's HTTP API (with --bootstrap)")
    ap.add_argument("--kafka", help="an Apache Kafka broker for the Java range reads")
    args = ap.parse_args()
    build_java("RangeRead")
    with contextlib.ExitStack() as stack:
        if args.bootstrap and args.url:
            bootstrap, url = args.bootstrap, args.url
        else:
            bootstrap, url = stack.enter_context(own_gateway())
        report = run(args, bootstrap, url)
    report["machine"] = f"{os.cpu_count()} cores"
    print(json.dumps(report, indent=2))


def run(args: argparse.Namespace, bootstrap: str, url: str) -> dict[str, object]:
    from pyspark.sql import functions as F
    from tmsgate.pipelines.examples.session import local_session

    rows = args.rows
    topic = fill(bootstrap, rows)
    kafka_topic = fill(args.kafka, rows) if args.kafka else None
    spark = local_session("spark-bench")
    samples: dict[str, list[float]] = {}

    def sample(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)
        log(f"  {name}: {value:,.0f} rows/s")

    def tms_read(tasks: int) -> int:
        reader = spark.read.format("tms").option("url", url).option("subscribe", topic)
        if tasks > 1:
            reader = reader.option("minPartitions", str(tasks))
        df = reader.load()
        df.write.format("noop").mode("overwrite").save()
        return rows  # noop counts nothing; the check below reads the count once

    def ceiling(tasks: int) -> int:
        reader = spark.read.format("tms_ceiling").option("rows", rows).option("tasks", tasks)
        reader.load().write.format("noop").mode("overwrite").save()
        return rows

    spark.dataSource.register(ceiling_source())
    assert (
        spark.read.format("tms").option("url", url).option("subscribe", topic).load().count()
        == rows
    )
    http = httpx.Client(base_url=url, timeout=60)
    for r in range(args.runs):
        log(f"run {r + 1}/{args.runs}")
        sample("tms_read_1_task", timed(rows, lambda: tms_read(1)))
        sample("tms_read_4_tasks", timed(rows, lambda: tms_read(4)))
        sample("ceiling_1_task", timed(rows, lambda: ceiling(1)))
        sample("ceiling_2_tasks", timed(rows, lambda: ceiling(2)))
        sample("consumer_gateway", timed(rows, lambda: consume(bootstrap, topic, rows)))
        sample("java_ranges_1_gateway", java_ranges(bootstrap, topic, rows, 1))
        sample("java_ranges_4_gateway", java_ranges(bootstrap, topic, rows, 4))
        if kafka_topic:
            sample("java_ranges_1_kafka", java_ranges(args.kafka, kafka_topic, rows, 1))
            sample("java_ranges_4_kafka", java_ranges(args.kafka, kafka_topic, rows, 4))
        out = f"spark-bench-out-{uuid.uuid4().hex[:8]}"
        assert http.put(f"/v1/namespaces/default/topics/{out}").status_code == 200
        df = spark.range(rows, numPartitions=2).select(
            F.col("id").cast("string").alias("key"), F.lit(VALUE).alias("value")
        )

        sample("tms_write", timed(rows, lambda df=df, out=out: write(df, url, out, http)))
    spark.stop()
    return {"rows": rows, "value_bytes": len(VALUE), **{k: median(v) for k, v in samples.items()}}


if __name__ == "__main__":
    main()
