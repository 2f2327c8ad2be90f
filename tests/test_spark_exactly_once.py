"""Exactly once through Spark: a streaming query from topic ``in`` through a transformation
into topic ``out`` (tests/spark_pipeline_driver.py, the tms source and sink), killed with
SIGKILL mid-batch several times and restarted from its checkpoint, ends with every input
record exactly once in ``out``; a read_committed reader polling ``out`` all along never sees
part of a batch (every batch is one transaction: its records appear all at once)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer
from gateway_harness import GatewayThread, gateway_thread
from tmsgate.protocol.columns import decode_columns

RECORDS = 2_000
# Each kill costs a Spark start (about 25 s here): two in CI; a soak sets more, e.g.
# TMSGATE_SPARK_KILLS=20 (docs/spark.md).
KILLS = int(os.environ.get("TMSGATE_SPARK_KILLS", "2"))
pytestmark = pytest.mark.timeout(max(600, 150 * KILLS))
DRIVER = Path(__file__).with_name("spark_pipeline_driver.py")


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[GatewayThread]:
    with gateway_thread(tmp_path / "gw", http=True) as g:
        yield g


def read_out(http: httpx.Client, topic: str) -> tuple[list[bytes | None], Counter[int]]:
    """Every committed record of ``topic`` and how many each write pointer has."""
    values: list[bytes | None] = []
    per_wp: Counter[int] = Counter()
    offset = 0
    while True:
        resp = http.post(
            f"/v1/namespaces/default/topics/{topic}/read",
            json={"offset": offset, "isolation": "read_committed"},
        )
        resp.raise_for_status()
        cols = decode_columns(resp.content)
        values += cols.values
        per_wp.update(cols.write_pointers)
        if not cols.values:
            return values, per_wp
        offset = cols.next_offset


class Watcher(threading.Thread):
    """Polls ``out`` as a read_committed reader until stopped, keeping what it saw."""

    def __init__(self, url: str, topic: str) -> None:
        super().__init__(name="watcher", daemon=True)
        self.http = httpx.Client(base_url=url, timeout=30)
        self.topic = topic
        self.seen: list[Counter[int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.seen.append(read_out(self.http, self.topic)[1])


def start_driver(gw: GatewayThread, source: str, sink: str, checkpoint: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(DRIVER), gw.http_url, source, sink, str(checkpoint)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its JVM and Python workers die with it (killpg)
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
    )


def test_killed_and_restarted_query_writes_every_record_exactly_once(
    gw: GatewayThread, tmp_path: Path
) -> None:
    http = httpx.Client(base_url=gw.http_url, timeout=30)
    suffix = uuid.uuid4().hex[:8]
    source, sink = f"in-{suffix}", f"out-{suffix}"
    for topic in (source, sink):
        assert http.put(f"/v1/namespaces/default/topics/{topic}").status_code == 200
    producer = Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(source, f"record-{i}".encode(), f"k{i % 7}".encode())
    assert producer.flush(20) == 0
    expected = Counter(f"RECORD-{i}".encode() for i in range(RECORDS))

    watcher = Watcher(gw.http_url, sink)
    watcher.start()
    checkpoint = tmp_path / "checkpoint"
    rng = random.Random(1)
    kills = 0
    while kills < KILLS:
        driver = start_driver(gw, source, sink, checkpoint)
        before = len(read_out(http, sink)[0])
        # Kill once the run has committed something new (it is mid-stream), after a
        # random extra moment (so the kill lands inside a batch as often as between two).
        deadline = time.monotonic() + 120
        while len(read_out(http, sink)[0]) == before and driver.poll() is None:
            assert time.monotonic() < deadline, "the query made no progress"
            time.sleep(0.2)  # polling another process's progress
        if driver.poll() is not None:
            break  # drained before it could be killed
        time.sleep(rng.uniform(0.0, 1.5))
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        kills += 1
    driver = start_driver(gw, source, sink, checkpoint)
    out, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0 and "drained" in out, out[-3000:]
    watcher.stop.set()
    watcher.join(30)

    values, per_wp = read_out(http, sink)
    assert Counter(values) == expected, "every input record exactly once"
    for snapshot in watcher.seen:
        for wp, count in snapshot.items():
            assert count == per_wp[wp], f"a reader saw {count} of batch {wp}'s {per_wp[wp]}"
    print(f"{kills} kills, {len(per_wp)} batches, {len(watcher.seen)} reader polls")
