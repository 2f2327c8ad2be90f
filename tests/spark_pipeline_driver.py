"""A Structured Streaming job for the exactly-once test (tests/test_spark_exactly_once.py),
run as its own process so that the test can kill it with SIGKILL mid-batch:

    python spark_pipeline_driver.py URL IN OUT CHECKPOINT

reads IN with the tms source, upper-cases each value (keeping the key), and writes OUT with
the tms sink, one micro-batch of at most 150 records at a time, until IN is drained."""

from __future__ import annotations

import sys


def main(url: str, source: str, sink: str, checkpoint: str) -> None:
    from pyspark.sql import functions as F
    from tmsgate.pipelines.examples.session import local_session

    spark = local_session("exactly-once-test")
    query = (
        spark.readStream.format("tms")
        .option("url", url)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "150")
        .load()
        .select("key", F.upper(F.col("value").cast("string")).alias("value"))
        .repartition(2)  # two writer tasks per batch: one transaction across both
        .writeStream.format("tms")
        .option("url", url)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    # Not availableNow: with PySpark 4.0 it takes one target up front, and would not
    # honour maxOffsetsPerTrigger's batches (docs/spark.md).
    query.processAllAvailable()
    query.stop()
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    print("drained", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
