"""The one local Spark session the ETL tests share (local[2], 2 shuffle partitions, UTC, no UI, small driver)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from services.etl.settings import EtlSettings


def local_session() -> SparkSession:
    builder = SparkSession.builder.master("local[2]").appName("petrel-etl-tests")
    for key, value in EtlSettings(shuffle_partitions=2).spark_conf().items():
        builder = builder.config(key, value)
    builder = builder.config("spark.driver.memory", "512m").config("spark.ui.showConsoleProgress", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
