"""The example pipelines (pipelines/examples/README.md) run with the one command their README
gives, ``tmsgate pipeline run NAME``, against a live gateway: the generator feeds ``orders``,
``order-totals --once`` drains it into per customer and minute totals exactly once, and
``export-parquet`` writes every order to Parquet. The streaming job runs in its own
process, as a user would run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer
from gateway_harness import GatewayThread, gateway_thread
from tmsgate.pipelines.examples import export_parquet

pytestmark = pytest.mark.timeout(600)
ORDERS = 600


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[GatewayThread]:
    with gateway_thread(tmp_path / "gw", http=True) as g:
        yield g


def pipeline(*args: str, cwd: Path) -> str:
    tmsgate = Path(sys.executable).with_name("tmsgate")
    done = subprocess.run(
        [str(tmsgate), "pipeline", "run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


def consume_all(bootstrap: str, topic: str, count: int) -> list[tuple[bytes, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([topic])
    out: list[tuple[bytes, bytes]] = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(out)} of {count} records of {topic}"
            if msg.error():
                if len(out) >= count:
                    return out
                continue
            out.append((msg.key(), msg.value()))
    finally:
        consumer.close()


def test_examples_generate_aggregate_and_export(spark, gw: GatewayThread, tmp_path: Path) -> None:
    # Orders a second apart in event time: 600 orders span ten one-minute windows.
    out = pipeline(
        "generate-orders",
        "--bootstrap",
        gw.bootstrap,
        "--count",
        str(ORDERS),
        "--spacing-ms",
        "1000",
        cwd=tmp_path,
    )
    assert f"{ORDERS} orders written to orders (1 partition) in " in out  # the summary line
    orders = [json.loads(v) for _, v in consume_all(gw.bootstrap, "orders", ORDERS)]
    assert len(orders) == ORDERS
    expected: dict[tuple[str, str], tuple[int, int]] = {}
    for o in orders:
        minute = datetime.fromtimestamp(o["ts"] // 60_000 * 60, UTC)
        key = (o["customer"], minute.strftime("%Y-%m-%d %H:%M:%S"))
        count, amount = expected.get(key, (0, 0))
        expected[key] = (count + 1, amount + o["amount"])

    # Three micro-batches of 250, 250 and 100 orders; each closes the windows its
    # watermark (latest order time less 30 s) has passed.
    out = pipeline(
        "order-totals",
        "--url",
        gw.http_url,
        "--once",
        "--max-offsets",
        "250",
        "--watermark",
        "30 seconds",
        cwd=tmp_path,
    )
    http = httpx.Client(base_url=gw.http_url, timeout=30)
    end = http.get("/v1/namespaces/default/topics/order-totals/offsets").json()["latest"]
    assert f"{ORDERS} orders read from orders, {end} totals written to order-totals in " in out
    totals = consume_all(gw.bootstrap, "order-totals", end)
    seen: Counter[tuple[str, str]] = Counter()
    for key, value in totals:
        row = json.loads(value)
        assert key.decode() == row["customer"]
        window = (row["customer"], row["window_start"])
        seen[window] += 1
        assert (row["orders"], row["amount"]) == expected[window], window
    assert seen and max(seen.values()) == 1, "each closed window written exactly once"
    closed_minutes = {w for _, w in seen}
    assert len(closed_minutes) >= 5, closed_minutes

    # export-parquet in the tests' shared Spark session (its command only adds the session)
    done = export_parquet.export(spark, gw.http_url, "orders", str(tmp_path / "orders.parquet"), 2)
    assert done.rows == ORDERS
    assert done.summary().startswith(f"{ORDERS} records of orders written to ")
    table = pq.read_table(tmp_path / "orders.parquet")
    assert table.num_rows == ORDERS
    assert sorted(table.column("offset").to_pylist()) == list(range(ORDERS))
    assert {"messageId", "writePointer", "headers"} <= set(table.column_names)
