"""The ``tms`` PySpark data source (docs/spark.md): ``register(spark)``, then
``spark.read.format("tms")``, ``readStream``, ``write`` and ``writeStream``. Needs the
``tmsgate[spark]`` extra (pyspark >= 4.0, pyarrow)."""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Make ``format("tms")`` known to this SparkSession."""
    from .source import TmsDataSource

    spark.dataSource.register(TmsDataSource)


__all__ = ["register"]
