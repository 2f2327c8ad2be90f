"""`tmsgate migrate` throughput: copy N records of 1 KiB from a source cluster into a fresh
tmsgate gateway, several times, and report the copy rate (records/s, MB/s).

    .venv/bin/python bench/migrate_bench.py                       # source: a tmsgate gateway
    .venv/bin/python bench/migrate_bench.py --source 127.0.0.1:39092   # e.g. Apache Kafka
    .venv/bin/python bench/migrate_bench.py --records 300000 --partitions 3 --runs 5 --json

The source topic is filled once (outside the timing) with a confluent-kafka producer;
each run then migrates it into a new target gateway (`tmsgate serve` on a temp store,
fsync on) with `tmsgate migrate --to`, and the rate is the copy phase's as migrate
reports it (connecting and planning excluded); the command's wall time is reported too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import subprocess
import sys
import time
import uuid

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_clients_bench import VENV_BIN, ck_common, log, self_started_gateway

_COPIED = re.compile(r"copied (\d+) records \(([\d.]+) MB\) in ([\d.]+) s")


def fill(bootstrap: str, topic: str, partitions: int, records: int, size: int) -> None:
    admin = AdminClient(ck_common(bootstrap))
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        fut.result(30)
    producer = confluent_kafka.Producer(
        {**ck_common(bootstrap), "linger.ms": 20, "batch.size": 1 << 20, "acks": "all"}
    )
    value = b"x" * size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=b"k%d" % i, value=value, headers=[("n", b"%d" % i)])
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("the source did not take every record")
    log(f"source: {records} records of {size} B in {topic} ({partitions} partitions)")


def one_run(source: str, topic: str) -> dict[str, float]:
    report: dict[str, object] = {}
    with self_started_gateway(report, prefix="tmsgate-migrate-bench-") as target:
        began = time.monotonic()
        done = subprocess.run(
            [
                str(VENV_BIN / "tmsgate"),
                "migrate",
                "--from",
                source,
                "--to",
                target,
                "--topics",
                re.escape(topic),
                "--groups",
                "^$",
                "--log-level",
                "WARNING",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - began
    if done.returncode:
        raise RuntimeError(f"migrate failed ({done.returncode}): {done.stderr[-2000:]}")
    match = _COPIED.search(done.stdout)
    if match is None:
        raise RuntimeError(f"no summary in migrate's output: {done.stdout[-2000:]}")
    records, mb, seconds = int(match[1]), float(match[2]), float(match[3])
    return {"records": records, "mb": mb, "seconds": seconds, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="source bootstrap (default: start a tmsgate gateway)")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=1024, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    topic = f"migrate-bench-{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        source = args.source or stack.enter_context(
            self_started_gateway({}, prefix="tmsgate-migrate-source-")
        )
        fill(source, topic, args.partitions, args.records, args.size)
        runs = []
        for i in range(args.runs):
            r = one_run(source, topic)
            runs.append(r)
            log(
                f"run {i + 1}: {r['records']:.0f} records in {r['seconds']:.2f} s "
                f"({r['records'] / r['seconds']:,.0f} records/s, {r['mb'] / r['seconds']:.0f} MB/s)"
                f"; command {r['wall']:.2f} s"
            )
    rates = [r["records"] / r["seconds"] for r in runs]
    result = {
        "source": args.source or "tmsgate gateway",
        "records": args.records,
        "value_bytes": args.size,
        "partitions": args.partitions,
        "runs": runs,
        "median_records_per_s": statistics.median(rates),
        "median_mb_per_s": statistics.median(r["mb"] / r["seconds"] for r in runs),
        "median_command_s": statistics.median(r["wall"] for r in runs),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"migrate {args.records} x {args.size} B, {args.partitions} partitions, from "
            f"{result['source']}: median {result['median_records_per_s']:,.0f} records/s "
            f"({result['median_mb_per_s']:.0f} MB/s) over {args.runs} runs; command "
            f"{result['median_command_s']:.2f} s"
        )


if __name__ == "__main__":
    sys.exit(main())
