"""Batch: export a topic's committed records (every partition, earliest to latest) to Parquet,
with the Kafka columns and the TMS message id and write pointer.

Also runs as a module:

    python -m tmsgate.pipelines.examples.export_parquet --url http://127.0.0.1:8080 \\
        --topic orders --out ./orders.parquet [--min-partitions 4]
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import parser, rate
from .session import local_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Exported:
    """What an export wrote, for its summary line."""

    topic: str
    out: str
    rows: int
    bytes: int | None  # None: not a local folder (another Hadoop file system)
    seconds: float

    def summary(self) -> str:
        size = "" if self.bytes is None else f" ({self.bytes / 1e3:,.0f} kB of Parquet)"
        return (
            f"{self.rows} records of {self.topic} written to {self.out}{size} in "
            f"{self.seconds:.1f}s, {rate(self.rows, self.seconds, 'records')}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    p = parser("export-parquet", __doc__)
    p.add_argument("--url", default="http://127.0.0.1:8080", help="the gateway's HTTP API")
    p.add_argument("--topic", default="orders")
    p.add_argument("--out", default="./orders.parquet", help="a folder of Parquet files")
    p.add_argument("--min-partitions", type=int, default=2, help="Spark tasks to read with")
    args = p.parse_args(argv)
    spark = local_session("export-parquet")
    try:
        done = export(spark, args.url, args.topic, args.out, args.min_partitions)
    finally:
        spark.stop()
    print(done.summary())
    return 0


def export(spark: SparkSession, url: str, topic: str, out: str, min_partitions: int) -> Exported:
    """Write ``topic`` to Parquet at ``out`` (replacing what is there)."""
    started = time.monotonic()
    df = (
        spark.read.format("tms")
        .option("url", url)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("minPartitions", str(min_partitions))
        .load()
    )
    df.write.mode("overwrite").parquet(out)
    rows = int(spark.read.parquet(out).count())
    local = Path(out)
    size = sum(f.stat().st_size for f in local.rglob("*.parquet")) if local.is_dir() else None
    return Exported(topic, out, rows, size, time.monotonic() - started)


if __name__ == "__main__":
    raise SystemExit(main())
