"""Batch: export a topic (every partition, earliest to latest, committed records) to
Parquet, with the Kafka columns and the TMS message id and write pointer.

    python -m tmsgate.pipelines.examples.export_parquet --url http://127.0.0.1:8080 \\
        --topic orders --out ./orders.parquet [--min-partitions 4]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .session import local_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="http://127.0.0.1:8080", help="the gateway's HTTP API")
    p.add_argument("--topic", default="orders")
    p.add_argument("--out", default="./orders.parquet")
    p.add_argument("--min-partitions", type=int, default=2, help="Spark tasks to read with")
    args = p.parse_args(argv)
    spark = local_session("export-parquet")
    try:
        rows = export(spark, args.url, args.topic, args.out, args.min_partitions)
    finally:
        spark.stop()
    print(f"{rows} records of {args.topic} written to {args.out}")
    return 0


def export(spark: SparkSession, url: str, topic: str, out: str, min_partitions: int) -> int:
    """Write ``topic`` to Parquet at ``out``; -> the rows written."""
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
    return int(spark.read.parquet(out).count())


if __name__ == "__main__":
    raise SystemExit(main())
