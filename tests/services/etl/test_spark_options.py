"""`PETREL_ETL_SPARK_OPTIONS`: more Spark settings of the job, given to its session and to spark-submit alike."""

from __future__ import annotations

from datetime import date

import pydantic
import pytest

from services.etl.settings import EtlSettings
from services.etl.submit import submit_command


def test_spark_options_reach_the_session_and_spark_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PETREL_ETL_SPARK_OPTIONS", " spark.executor.memory=4g ,spark.sql.adaptive.enabled = false,")
    settings = EtlSettings(master="spark://127.0.0.1:7077")

    conf = settings.spark_conf()

    assert conf["spark.executor.memory"] == "4g"
    assert conf["spark.sql.adaptive.enabled"] == "false"
    assert conf["spark.sql.session.timeZone"] == "UTC", "the job's own settings stay"
    command = submit_command(settings, date(2026, 11, 22))
    assert "spark.executor.memory=4g" in command
    assert command[command.index("spark.sql.adaptive.enabled=false") - 1] == "--conf"


@pytest.mark.parametrize(
    ("given", "refusal"),
    [
        ("spark.sql.session.timeZone=Europe/Paris", "spark.sql.session.timeZone is not yours to set here"),
        ("spark.sql.parquet.compression.codec=snappy", r"\(the tables are zstd Parquet\)"),
        ("spark.sql.shuffle.partitions=64", r"\(PETREL_ETL_SHUFFLE_PARTITIONS\)"),
        ("spark.driver.extraJavaOptions=-Xss1m", r"\(PETREL_ETL_JAVA_OPTIONS\)"),
        ("executor.memory=4g", "'executor.memory=4g' is not a Spark setting"),
        ("spark.executor.memory", "'spark.executor.memory' is not a Spark setting"),
        ("spark.executor.memory=", "'spark.executor.memory=' is not a Spark setting"),
    ],
)
def test_a_spark_option_the_job_owns_or_that_is_not_one_is_refused_by_name(given: str, refusal: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=refusal):
        EtlSettings(spark_options=f"spark.executor.cores=2,{given}")
