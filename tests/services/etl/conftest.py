"""One local[2] Spark session for every ETL test of a worker, and the story set read once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from services.etl.events import EventLog, read_event_log
from tests.support.event_files import DAY, write_november_22
from tests.support.spark import local_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = local_session()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def story_events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The events of 2026-11-22 (tests.support.event_files) in the exporter's layout; tests only read them."""
    root = tmp_path_factory.mktemp("events")
    write_november_22(root)
    return root


@pytest.fixture(scope="session")
def story_log(spark: SparkSession, story_events: Path) -> EventLog:
    return read_event_log(spark, story_events.as_uri(), date.fromisoformat(DAY), lookback_days=1)
