"""The one local Spark session the ETL tests share (local[2], 2 shuffle partitions, UTC, no UI, small driver)."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from services.etl.settings import EtlSettings


def local_session() -> SparkSession:
    """Python workers run this venv's Python.

    PYSPARK_PYTHON, not `spark.pyspark.python`, is what a Python data source's planning
    and reading workers are started with (SparkContext.pythonExec).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master("local[2]").appName("petrel-etl-tests")
    for key, value in EtlSettings(shuffle_partitions=2).spark_conf().items():
        builder = builder.config(key, value)
    builder = (
        builder.config("spark.driver.memory", "512m")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
