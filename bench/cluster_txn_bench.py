"""Kafka transactions/s: one gateway against three, on the HBase stand-in (issue 36).

    .venv/bin/python bench/cluster_txn_bench.py [--quick] [--runs 3] [--seconds 15]

The Thrift 1 stand-in (tests/hbase_standin.py: NOT HBase, tables in memory) runs as its
own process; on it, for each setup, `tmsgate serve --cluster` processes
(bench/cluster_gateways.py): one alone, then three on a fresh prefix. The same client
load for both: ``--producers`` confluent-kafka transactional producers (one thread each,
one process: librdkafka does the work off the GIL), each committing transactions of 10
records of 1 KiB, round-robin over 6 partitions of one topic, 2 led by each gateway (so
with three gateways every commit has a part on every gateway). After a warm-up, ``--runs`` runs of
``--seconds`` each; the figure is the median of the runs' commits/s over all producers.

Beside it, the CPU each process used per run (/proc/PID/stat: the gateways, the stand-in,
this process with the clients) as cores busy (CPU seconds / wall seconds): on a 2-core
machine, a sum near 2 says the machine, not the design, bounds the figure. And the CPU
milliseconds each gateway spends per transaction, the controller's among them: every
transaction's start, decision and commit go through it, so 1000 / its ms per
transaction is what one controller could do given a core of its own.

Not part of the test suite. Progress and a table go to stderr, one JSON summary to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
from cluster_gateways import (
    ClusterGateway,
    bootstrap_of,
    cluster_gateways,
    controller_of,
    leaders_of,
    spread_partitions,
)
from kafka_clients_bench import ck_common, free_port, log, proc_cpu_seconds, setup_logging, stop

REPO = Path(__file__).resolve().parent.parent
PARTITIONS = 6
TXN_RECORDS = 10
VALUE = b"x" * 1024


@contextlib.contextmanager
def standin_process() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The stand-in in its own process (its own GIL), with the worker threads 3 gateways
    of pool_size 8 need (docs/hbase.md)."""
    port = free_port()
    cmd = [
        sys.executable,
        str(REPO / "tests/hbase_standin.py"),
        "--port",
        str(port),
        "--min-worker-threads",
        "64",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if "stand-in" not in line:
            raise RuntimeError(f"the stand-in did not start: {line!r}")
        yield f"127.0.0.1:{port}", proc
    finally:
        stop(proc)


class TxnLoop:
    """One transactional producer committing 10-record transactions until told to stop."""

    def __init__(self, bootstrap: str, topic: str, partitions: list[int]) -> None:
        self.topic = topic
        self.partitions = partitions
        self.producer = confluent_kafka.Producer(
            {
                **ck_common(bootstrap),
                "transactional.id": f"cluster-txn-bench-{uuid.uuid4().hex[:8]}",
                "linger.ms": 5,
            }
        )
        self.producer.init_transactions(60)
        self.commits = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self._stop.set()
        self._thread.join(120)
        if self.error is not None:
            raise RuntimeError(f"a producer failed: {self.error!r}") from self.error

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.producer.begin_transaction()
                for i in range(TXN_RECORDS):
                    partition = self.partitions[i % len(self.partitions)]
                    self.producer.produce(self.topic, VALUE, partition=partition)
                self.producer.commit_transaction(60)
                self.commits += 1
        except BaseException as exc:  # reported by finish()
            self.error = exc


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    return {name: proc_cpu_seconds(pid) for name, pid in pids.items()}


def measure(
    gws: list[ClusterGateway],
    standin: subprocess.Popen[bytes],
    topic: str,
    partitions: list[int],
    args: argparse.Namespace,
) -> dict[str, object]:
    controller = controller_of(gws)
    pids = {
        (f"gateway {gw.node_id}" + (" (controller)" if gw is controller else "")): gw.proc.pid
        for gw in gws
    }
    pids["stand-in"] = standin.pid
    pids["clients (this process)"] = os.getpid()
    loops = [TxnLoop(bootstrap_of(gws), topic, partitions) for _ in range(args.producers)]
    for loop in loops:
        loop.start()
    runs: list[dict[str, object]] = []
    try:
        time.sleep(args.warmup)
        for run in range(args.runs):
            # No /metrics scrape in the window: rendering it costs the gateways CPU
            # (bench/hbase_calls_bench.py counts the cluster calls per transaction).
            commits0, cpu0, t0 = sum(loop.commits for loop in loops), cpu_of(pids), time.monotonic()
            time.sleep(args.seconds)
            commits = sum(loop.commits for loop in loops) - commits0
            cpu, wall = cpu_of(pids), time.monotonic() - t0
            busy = {name: round((cpu[name] - cpu0[name]) / wall, 2) for name in pids}
            row: dict[str, object] = {
                "seconds": round(wall, 2),
                "commits": commits,
                "txn_per_s": round(commits / wall, 1),
                "cores_busy": busy,
                "cores_busy_total": round(sum(busy.values()), 2),
                "cpu_ms_per_txn": {
                    name: round(1000 * (cpu[name] - cpu0[name]) / max(commits, 1), 2)
                    for name in pids
                },
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
            log(
                f"  run {run + 1}: {row['txn_per_s']} txn/s, cores busy "
                f"{row['cores_busy_total']} ({busy})"
            )
            runs.append(row)
    finally:
        for loop in loops:
            loop.finish()
    rates = [float(r["txn_per_s"]) for r in runs]  # type: ignore[arg-type]
    median_run = runs[rates.index(statistics.median_low(rates))]
    return {
        "gateways": len(gws),
        "controller": controller.node_id,
        "leaders": {p: leaders_of(gws, topic)[p] for p in partitions},
        "median_txn_per_s": statistics.median(rates),
        "median_run": median_run,
        "runs": runs,
    }


def setup(address: str, standin: subprocess.Popen[bytes], nodes: int, args: argparse.Namespace):
    store = f"hbase://{address}/ctxn{nodes}x{uuid.uuid4().hex[:6]}"
    log(f"{nodes} gateway(s) --cluster on {store}")
    with cluster_gateways(store, nodes) as gws:
        topic, partitions = spread_partitions(gws, "ctxn", PARTITIONS)
        result = measure(gws, standin, topic, partitions, args)
    log(f"{nodes} gateway(s): median {result['median_txn_per_s']} txn/s")
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="runs of 4 s, 3 s of warm-up")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0, help="length of one run")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before the runs")
    parser.add_argument("--producers", type=int, default=2)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup = 4.0, 3.0
    warnings = setup_logging()
    report: dict[str, object] = {
        "standin": "tests/hbase_standin.py, its own process (not HBase)",
        "cpus": os.cpu_count(),
        "producers": args.producers,
        "partitions": PARTITIONS,
        "records_per_txn": TXN_RECORDS,
        "value_bytes": len(VALUE),
        "runs": args.runs,
        "seconds_per_run": args.seconds,
        "loadavg_at_start": [round(v, 2) for v in os.getloadavg()],
    }
    with standin_process() as (address, standin):
        report["setups"] = [setup(address, standin, nodes, args) for nodes in (1, 3)]
    report["warnings"] = dict(warnings.counts)
    for result in report["setups"]:  # type: ignore[attr-defined]
        row = result["median_run"]
        log(
            f"{result['gateways']} gateway(s): {result['median_txn_per_s']:>8g} txn/s (median of "
            f"{args.runs}); median run: cores busy {row['cores_busy_total']}, "
            f"CPU ms/txn {row['cpu_ms_per_txn']}"
        )
    print(json.dumps(report, separators=(",", ":")))


if __name__ == "__main__":
    main()
