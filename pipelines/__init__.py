"""Pipelines into and out of tmsgate: `tmsgate migrate` (migrate.py) copies a Kafka
cluster in, offsets kept; the PySpark ``tms`` data source (spark/, docs/spark.md) reads and
writes topics, exactly once, once ``register(spark)`` has named it to a SparkSession."""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """``format("tms")`` for this SparkSession (needs the ``tmsgate[spark]`` extra)."""
    from .spark import register as register_tms

    register_tms(spark)
