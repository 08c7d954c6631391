"""The SparkSession the job runs in: UTC, dynamic partition overwrite, zstd Parquet, no UI unless asked."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from services.etl.settings import EtlSettings

APP_NAME = "petrel-etl"


def build_session(settings: EtlSettings, *, submitted: bool = False) -> SparkSession:
    """The job's session; under spark-submit (`submitted`) the master is spark-submit's, not ours."""
    builder = SparkSession.builder.appName(APP_NAME)
    if not submitted:
        builder = builder.master(settings.master)
    if not submitted and settings.runs_locally:
        # petrel-commitlog's Python workers start with PYSPARK_PYTHON (else `python3`): here, this Python, with Petrel.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in settings.spark_conf().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
