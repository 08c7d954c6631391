"""The ETL tests' fixtures: one local Spark session for the whole run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from tests.support.spark import local_spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = local_spark_session()
    yield session
    session.stop()
