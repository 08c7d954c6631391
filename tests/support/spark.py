"""The one local Spark session the ETL tests share: small, quiet, in UTC."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def local_spark_session() -> SparkSession:
    """A `local[2]` session: 2 shuffle partitions, no UI, UTC, a small driver; Python workers run this venv's Python.

    PYSPARK_PYTHON, not `spark.pyspark.python`, is what a Python data source's planning
    and reading workers are started with (SparkContext.pythonExec).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master("local[2]")
        .appName("petrel-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "512m")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .getOrCreate()
    )
