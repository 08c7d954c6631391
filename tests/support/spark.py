"""The one local Spark session the ETL tests share (local[2], 2 shuffle partitions, UTC, no UI, small driver)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from services.etl.session import local_python_workers
from services.etl.settings import EtlSettings


def local_session() -> SparkSession:
    """Python workers run this venv's Python, as in the job's own local session."""
    builder = SparkSession.builder.master("local[2]").appName("petrel-etl-tests")
    conf = EtlSettings(shuffle_partitions=2).spark_conf() | local_python_workers()
    for key, value in conf.items():
        builder = builder.config(key, value)
    builder = (
        builder.config("spark.driver.memory", "512m")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
