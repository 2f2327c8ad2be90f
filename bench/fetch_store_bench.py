"""Fetch from the store: consumers far behind the head, the batch cache empty.

    .venv/bin/python bench/fetch_store_bench.py [--rows 300000] [--runs 3] [--kafka host:port]
                                                [--no-java]

Starts its own `tmsgate serve` (LevelDB, fsync) on a temporary directory, writes --rows
records of 1 KiB to one partition with confluent-kafka, and then, for each run, restarts
the gateway (so nothing comes from the batch cache of recently produced batches) and reads
the whole topic from offset 0 with:

  consumer        one confluent-kafka consumer (assign, poll to the end)
  java_1, java_4  bench/java/RangeRead.java: what each task of Spark's own
                  ``format("kafka")`` batch read does (kafka-clients 3.9.0: assign, seek to
                  a range start, poll to its end, Spark's executor consumer settings), one
                  range, then four ranges in parallel

Each figure: rows/s, and the gateway process's CPU time per row (user + system, from
/proc), the median of --runs runs. --kafka runs the Java reads against that broker too
(the local Kafka oracle of peers-and-ceilings.md), side by side. Also measured in-process:
the store read and the Kafka encoding of the same rows (``store_read``, ``encode``; us per
row, no sockets), the part of the fetch path this benchmark is about.

Progress goes to stderr, one JSON summary to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from kafka_clients_bench import (  # noqa: E402
    build_java,
    free_port,
    proc_cpu_seconds,
    stop,
    wait_for_port,
)
from spark_bench import consume, fill, java_ranges, log, serve_command  # noqa: E402


@contextlib.contextmanager
def gateway(store_dir: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    cmd = serve_command(store_dir, port, None)
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(proc, ("127.0.0.1", port))
        yield f"127.0.0.1:{port}", proc
    finally:
        stop(proc)


def in_process(store_dir: str, topic: str, rows: int) -> dict[str, float]:
    """us per row of Store.read as messages and of their Kafka encoding, 1,000 rows per
    read, and of a fetch's read (1 MB, produced batches as stored) with its encoding (the
    gateway must be stopped: LevelDB has one owner)."""
    import gc

    from tmsgate.gateway.kafka.records import encode_rows
    from tmsgate.storage import TopicId, open_store

    gc.freeze()
    gc.set_threshold(20_000, 20, 50)  # as `tmsgate serve` sets it
    tid = TopicId("default", topic)
    read_s = encode_s = 0.0
    with open_store(f"leveldb://{store_dir}") as store:
        offset = 0
        while offset < rows:
            t0 = time.process_time()
            res = store.read(tid, offset=offset, max_messages=1000, max_bytes=1 << 20)
            t1 = time.process_time()
            encode_rows(res.rows, offset, res.next_offset, False)
            encode_s += time.process_time() - t1
            read_s += t1 - t0
            offset = res.next_offset
        # What a Kafka fetch does: produced batches kept as sent come as they are.
        offset, t0 = 0, time.process_time()
        while offset < rows:
            res = store.read(tid, offset=offset, max_bytes=1 << 20, kafka_batches=True)
            encode_rows(res.rows, offset, res.next_offset, False)
            offset = res.next_offset
        fetch_s = time.process_time() - t0
    return {
        "store_read_us": read_s / rows * 1e6,
        "encode_us": encode_s / rows * 1e6,
        "fetch_read_us": fetch_s / rows * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kafka", help="an Apache Kafka broker for the Java range reads")
    ap.add_argument("--no-java", action="store_true", help="skip the Java range reads")
    args = ap.parse_args()
    java = not args.no_java
    if java:
        build_java("RangeRead")
    samples: dict[str, list[float]] = {}

    def sample(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)
        log(f"  {name}: {value:,.2f}")

    with tempfile.TemporaryDirectory(prefix="tmsgate-fetch-bench-") as workdir:
        store_dir = f"{workdir}/store"
        with gateway(store_dir) as (bootstrap, _):
            topic = fill(bootstrap, args.rows)
        kafka_topic = fill(args.kafka, args.rows) if args.kafka and java else None
        readers: list[tuple[str, object]] = [
            ("consumer", lambda b: args.rows / _seconds(lambda: consume(b, topic, args.rows)))
        ]
        if java:
            readers += [
                ("java_1", lambda b: java_ranges(b, topic, args.rows, 1)),
                ("java_4", lambda b: java_ranges(b, topic, args.rows, 4)),
            ]
        for run in range(args.runs):
            log(f"run {run + 1} of {args.runs}")
            for name, read in readers:
                with gateway(store_dir) as (bootstrap, proc):  # restarted: the cache is empty
                    cpu0 = proc_cpu_seconds(proc.pid)
                    sample(f"{name}_rows_per_s", read(bootstrap))  # type: ignore[operator]
                    sample(
                        f"{name}_gateway_cpu_us",
                        (proc_cpu_seconds(proc.pid) - cpu0) / args.rows * 1e6,
                    )
                if kafka_topic and name.startswith("java"):
                    ranges = int(name.rsplit("_", 1)[1])
                    sample(
                        f"{name}_kafka_rows_per_s",
                        java_ranges(args.kafka, kafka_topic, args.rows, ranges),
                    )
            for name, value in in_process(store_dir, topic, args.rows).items():
                sample(name, value)
    summary = {
        name: {"median": round(statistics.median(vals), 2), "runs": [round(v, 2) for v in vals]}
        for name, vals in samples.items()
    }
    summary["rows"] = args.rows  # type: ignore[assignment]
    print(json.dumps(summary, indent=1))


def _seconds(run: object) -> float:
    started = time.perf_counter()
    run()  # type: ignore[operator]
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
