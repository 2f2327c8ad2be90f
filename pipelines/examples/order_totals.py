"""Structured Streaming: per customer and minute, the number and sum of orders, from topic
``orders`` into topic ``order-totals``, exactly once.

The tms sink commits each micro-batch as one TMS transaction; a restarted query resumes from
its checkpoint. Each output record: key = customer, value = JSON {"customer",
"window_start", "orders", "amount"}, written once per (customer, window) when the watermark
(the latest order time seen, less ``--watermark``) passes the window's end: append mode,
because PySpark 4.0's Python data sources refuse Spark's update mode. Orders later than the
watermark are dropped, as Spark does. Also runs as a module:

    python -m tmsgate.pipelines.examples.order_totals --url http://127.0.0.1:8080 \\
        --checkpoint ./checkpoints/order-totals [--once]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from tmsgate.pipelines.spark.gateway import Gateway

from . import parser, rate
from .session import local_session


def main(argv: Sequence[str] | None = None) -> int:
    p = parser("order-totals", __doc__)
    p.add_argument("--url", default="http://127.0.0.1:8080", help="the gateway's HTTP API")
    p.add_argument("--source", default="orders")
    p.add_argument("--sink", default="order-totals")
    p.add_argument("--checkpoint", default="./checkpoints/order-totals")
    p.add_argument("--trigger-seconds", type=float, default=5.0)
    p.add_argument("--max-offsets", type=int, default=50_000, help="maxOffsetsPerTrigger")
    p.add_argument("--watermark", default="1 minute", help="how late an order may arrive")
    p.add_argument("--once", action="store_true", help="process what is there, then stop")
    args = p.parse_args(argv)

    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from .query_tally import QueryTally

    with Gateway(args.url) as gateway:
        gateway.ensure_topic(args.sink)
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
        orders.withWatermark("event_time", args.watermark)
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
        .outputMode("append")
    )
    tally = QueryTally()
    spark.streams.addListener(tally)
    # --once: process what is there in maxOffsetsPerTrigger-sized batches, then stop. Not
    # availableNow: PySpark 4.0's Python sources take one target for it (docs/spark.md).
    seconds = 0.2 if args.once else args.trigger_seconds
    started = time.monotonic()
    query = writer.trigger(processingTime=f"{seconds} seconds").start()
    try:
        if args.once:
            query.processAllAvailable()
            query.stop()
        else:
            query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    except StreamingQueryException:  # reported below, after what the query did
        query.stop()
    took = time.monotonic() - started
    read, written, batches = tally.totals(query)
    print(
        f"{read} orders read from {args.source}, {written} totals written to {args.sink} in "
        f"{batches} micro-batch{'es' if batches != 1 else ''}, {took:.1f}s, "
        f"{rate(read, took, 'orders')}"
    )
    failed = query.exception()
    spark.stop()
    if failed is not None:
        print(f"order-totals failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
