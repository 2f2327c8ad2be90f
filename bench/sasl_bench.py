"""What a SASL login costs: confluent-kafka produce and consume through a PLAINTEXT gateway and
a SASL_PLAINTEXT one (SCRAM-SHA-256), each a `tmsgate serve` this script starts on a
temporary LevelDB store.

    .venv/bin/python bench/sasl_bench.py [--records 200000] [--runs 3]

Measured, each the median of --runs runs alternating between the two gateways, 1 KiB
values, one partition, a fresh topic per run: produce msgs/s (acks=all, linger.ms=5,
batch.size=1000000, timed from the first send to the last delivery report) and consume
msgs/s (assign + seek to 0, to the end). The login happens once per connection, so the
difference is the per-request check, within the noise of this 2-core machine.
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
import uuid
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kafka_clients_bench import free_port, stop, wait_for_port

TMSGATE = Path(sys.executable).with_name("tmsgate")
USER, PASSWORD = "bench", "bench-secret"
VALUE = b"v" * 1024


@contextlib.contextmanager
def gateway(sasl: bool) -> Iterator[dict[str, str]]:
    with tempfile.TemporaryDirectory(prefix="tmsgate-sasl-bench-") as workdir:
        store = f"leveldb://{workdir}/store"
        conf = {"bootstrap.servers": f"127.0.0.1:{free_port()}"}
        extra: list[str] = []
        if sasl:
            subprocess.run(
                [str(TMSGATE), "users", "add", USER, "--password-stdin", "--store", store],
                input=PASSWORD + "\n", text=True, check=True, capture_output=True,
            )  # fmt: skip
            extra = ["--kafka-security", "sasl_plaintext", "--sasl-mechanisms", "SCRAM-SHA-256"]
            conf |= {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": USER,
                "sasl.password": PASSWORD,
            }
        listen = conf["bootstrap.servers"]
        cmd = [str(TMSGATE), "serve", "--store", store, "--kafka-listen", listen, "--no-http"]
        proc = subprocess.Popen([*cmd, *extra, "--log-level", "WARNING"])
        try:
            host, port = listen.split(":")
            wait_for_port(proc, (host, int(port)))
            yield conf
        finally:
            stop(proc)


def produce(conf: dict[str, str], topic: str, n: int) -> float:
    p = Producer({**conf, "linger.ms": 5, "batch.size": 1_000_000, "acks": "all"})
    p.produce(topic, VALUE)  # creates the topic and logs in, outside the timing
    assert p.flush(30) == 0
    started = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(60) == 0
    return n / (time.perf_counter() - started)


def consume(conf: dict[str, str], topic: str, n: int) -> float:
    c = Consumer(
        {
            **conf,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.queue.backoff.ms": 10,  # as kafka_clients_bench.py: no idle second
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got, started = 0, time.perf_counter()
    while got < n + 1:
        # Never ask for more than is left: consume() waits its whole timeout for the rest.
        got += sum(1 for m in c.consume(min(10_000, n + 1 - got), 5) if not m.error())
    rate = (n + 1) / (time.perf_counter() - started)
    c.close()
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    samples: dict[str, list[float]] = {}
    for run in range(args.runs):
        for sasl in (False, True):
            name = "sasl_scram" if sasl else "plaintext"
            with gateway(sasl) as conf:
                topic = f"sasl-bench-{uuid.uuid4().hex[:8]}"
                for what, fn in (("produce", produce), ("consume", consume)):
                    rate = fn(conf, topic, args.records)
                    samples.setdefault(f"{name}_{what}", []).append(rate)
                    print(f"run {run + 1} {name} {what}: {rate:,.0f} msgs/s", file=sys.stderr)
    report = {
        k: {"median": round(statistics.median(v)), "runs": [round(x) for x in v]}
        for k, v in samples.items()
    }
    print(json.dumps({"records": args.records, **report}, indent=2))


if __name__ == "__main__":
    main()
