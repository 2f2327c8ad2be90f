"""Structured Streaming: per customer and minute, the number and sum of orders, from topic
``orders`` into topic ``order-totals``, exactly once (the tms sink commits each micro-batch
as one TMS transaction; a restarted query resumes from its checkpoint).

    python -m tmsgate.pipelines.examples.order_totals --url http://127.0.0.1:8080 \\
        --checkpoint ./checkpoints/order-totals [--once]

Each output record: key = customer, value = JSON {"customer", "window_start", "orders",
"amount"}; the update output mode writes a window's new totals whenever they change, so
the latest record per (customer, window) is the current total.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .session import local_session


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="http://127.0.0.1:8080", help="the gateway's HTTP API")
    p.add_argument("--source", default="orders")
    p.add_argument("--sink", default="order-totals")
    p.add_argument("--checkpoint", default="./checkpoints/order-totals")
    p.add_argument("--trigger-seconds", type=float, default=5.0)
    p.add_argument("--max-offsets", type=int, default=50_000, help="maxOffsetsPerTrigger")
    p.add_argument("--once", action="store_true", help="process what is there, then stop")
    args = p.parse_args(argv)

    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    spark = local_session("order-totals")
    order = StructType(
        [
            StructField("order", LongType()),
            StructField("customer", StringType()),
            StructField("amount", LongType()),
            StructField("ts", LongType()),
        ]
    )
    orders = (
        spark.readStream.format("tms")
        .option("url", args.url)
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_offsets))
        .load()
        .select(F.from_json(F.col("value").cast("string"), order).alias("o"))
        .select("o.*")
        .withColumn("event_time", F.timestamp_millis("ts"))
    )
    totals = (
        orders.withWatermark("event_time", "2 minutes")
        .groupBy(F.window("event_time", "1 minute"), "customer")
        .agg(F.count("*").alias("orders"), F.sum("amount").alias("amount"))
        .select(
            F.col("customer").alias("key"),
            F.to_json(
                F.struct(
                    "customer",
                    F.col("window.start").cast("string").alias("window_start"),
                    "orders",
                    "amount",
                )
            ).alias("value"),
        )
    )
    writer = (
        totals.writeStream.format("tms")
        .option("url", args.url)
        .option("topic", args.sink)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("update")
    )
    writer = (
        writer.trigger(availableNow=True)
        if args.once
        else writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    )
    query = writer.start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
