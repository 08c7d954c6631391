"""One local[2] Spark session for every ETL test of a worker, and the story set's days run once into a warehouse."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from services.etl.job import DailyRun, run_daily
from services.etl.settings import EtlSettings
from tests.support.event_files import DAY, write_november_22
from tests.support.spark import local_session
from tests.support.spark_session_guard import pytest_runtest_makereport  # noqa: F401  # a timeout leaves `spark` usable

NEXT_DAY = "2026-11-23"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = local_session()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def story_settings(tmp_path_factory: pytest.TempPathFactory) -> EtlSettings:
    """The events of 2026-11-22 (tests.support.event_files) in the exporter's layout, and a warehouse for them."""
    events = tmp_path_factory.mktemp("events")
    write_november_22(events)
    warehouse = tmp_path_factory.mktemp("warehouse")
    return EtlSettings(events_uri=events.as_uri(), warehouse_uri=warehouse.as_uri(), lookback_days=1)


@pytest.fixture(scope="session")
def warehouse(story_settings: EtlSettings) -> Path:
    return Path(story_settings.warehouse.removeprefix("file://"))


@pytest.fixture(scope="session")
def story_runs(spark: SparkSession, story_settings: EtlSettings) -> dict[str, DailyRun]:
    """The 23rd (the late send's folder), then the 22nd; tests that run the job again leave these rows as they were."""
    return {day: run_daily(spark, story_settings, date.fromisoformat(day)) for day in (NEXT_DAY, DAY)}


SPARK_TEST_TIMEOUT = 600
"""pytest-timeout's bound of an ETL test: the first of a worker may run a day's job in a session fixture (about a
minute while the suite runs, four on a day the machine is 4x slower), then its own; 120 s (the suite's) cut the
fixture off on a loaded machine, and every test of the module failed with it."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/services/etl without a bound of its own gets SPARK_TEST_TIMEOUT."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPARK_TEST_TIMEOUT))
