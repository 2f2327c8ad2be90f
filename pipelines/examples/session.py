"""One SparkSession for the examples: local mode on this machine, the tms source registered."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_session(app: str, master: str = "local[2]") -> SparkSession:
    """A SparkSession with the ``tms`` data source registered. Spark's defaults are sized
    for clusters: 200 shuffle partitions would make a local aggregation 200 tasks a batch."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from tmsgate.pipelines.spark import register

    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark
