"""The one local Spark session the ETL tests share (local[2], 2 shuffle partitions, UTC, no UI, small driver), and the
JVM options of every Spark JVM a test starts."""

from __future__ import annotations

from pyspark.sql import SparkSession

from services.etl.session import local_python_workers
from services.etl.settings import EtlSettings

TEST_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""A test's JVM lives for seconds to minutes on small data: the client compiler alone (no C2 compiler threads
taking the 2 cores for code that would pay off only in a long run) and the serial collector (no parallel GC
threads for a heap of a few hundred MB). The job's `java_options` setting; a standalone cluster's daemons too."""

TEST_SPARK_OPTIONS = (
    "spark.sql.codegen.wholeStage=false,spark.sql.codegen.factoryMode=NO_CODEGEN,spark.sql.adaptive.enabled=false"
)
"""A test's query reads a few hundred rows once: Spark's expressions interpreted rather than generated as Java and
compiled by Janino for each new plan, and no adaptive re-planning between stages (the job's `spark_options` setting).
Three ETL test files alone (test_audit_daily, test_push_hourly, test_cli, `-n0`, a quiet machine): 147 -> 100
CPU-s, 115 -> 81 s, the same rows. `petrel bench etl`, 10 million events, keeps Spark's defaults, which pay off
there, and compares its rows with DuckDB's."""


def spark_test_env() -> dict[str, str]:
    """The environment of a `petrel etl ...` process a test starts: TEST_JAVA_OPTIONS for its JVMs (and its
    executors'), TEST_SPARK_OPTIONS, and the shared session's 2 shuffle partitions (2 cores; the default 8 make 4x
    the tasks of a stage on a test's few hundred rows)."""
    return {
        "PETREL_ETL_JAVA_OPTIONS": TEST_JAVA_OPTIONS,
        "PETREL_ETL_SHUFFLE_PARTITIONS": "2",
        "PETREL_ETL_SPARK_OPTIONS": TEST_SPARK_OPTIONS,
    }


def local_session() -> SparkSession:
    """Python workers run this venv's Python, as in the job's own local session."""
    builder = SparkSession.builder.master("local[2]").appName("petrel-etl-tests")
    settings = EtlSettings(shuffle_partitions=2, java_options=TEST_JAVA_OPTIONS, spark_options=TEST_SPARK_OPTIONS)
    conf = settings.spark_conf() | local_python_workers()
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
