"""The SparkSession the job runs in: UTC, dynamic partition overwrite, zstd Parquet, no UI unless asked."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from services.etl.settings import EtlSettings

APP_NAME = "petrel-etl"


def local_python_workers() -> dict[str, str]:
    """The conf that makes a local session's Python workers run this venv's Python.

    PYSPARK_PYTHON, not `spark.pyspark.python`, is what a Python data source's (`petrel-commitlog`)
    planning and reading workers are started with (SparkContext.pythonExec): it is set to this
    Python when unset, and the conf to the same. Only for a local master: a cluster's executors
    run their own Python, which a path on this machine would not name.
    """
    python = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return {"spark.pyspark.python": python, "spark.pyspark.driver.python": python}


def build_session(settings: EtlSettings, *, submitted: bool = False) -> SparkSession:
    """The job's session; under spark-submit (`submitted`) the master is spark-submit's, not ours."""
    builder = SparkSession.builder.appName(APP_NAME)
    conf = settings.spark_conf()
    if not submitted:
        builder = builder.master(settings.master)
    if settings.runs_locally and not submitted:
        conf |= local_python_workers()
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
