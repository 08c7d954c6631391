"""Fixtures shared by service tests: settings pointed at a temporary data dir, served apps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from libs.compiled import SWITCH, describe
from services.broker.app import create_app as broker_app
from services.nameserver.app import create_app as nameserver_app
from services.nameserver.settings import NameserverSettings
from tests.support.apps import broker_settings
from tests.support.markers import starts_spark
from tests.support.scheduling import HeavyFirstFileScheduling
from tests.support.serving import ServedApp, serving

# A test of the suite's own plugins (tests.support.spark_session_guard) runs a pytest of its own.
pytest_plugins = ["pytester", "tests.support.async_timeouts"]


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No PETREL_* setting of the developer's shell leaks into a test (but PETREL_COMPILED, which the run's processes
    share: the plain run of tests/libs/test_plain_modules.py starts its services' processes plain too)."""
    import os

    for name in list(os.environ):
        if name.startswith("PETREL_") and name != SWITCH:
            monkeypatch.delenv(name)
    monkeypatch.setenv("PETREL_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture
def nameserver() -> Iterator[ServedApp]:
    with serving(nameserver_app(NameserverSettings(port=0))) as served:
        yield served


@pytest.fixture
def broker(nameserver: ServedApp) -> Iterator[ServedApp]:
    settings = broker_settings(nameserver)
    with serving(broker_app(settings), settings.port) as served:
        yield served


@pytest.hookimpl(optionalhook=True)  # xdist's hook: absent under `-p no:xdist`
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> HeavyFirstFileScheduling | None:
    """`--dist loadfile` (make test) spreads the heavy files over the workers (tests.support.scheduling)."""
    return HeavyFirstFileScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


def pytest_report_header() -> str:
    """Whether the hot modules run compiled (libs.compiled): `make test` runs what `make run` runs."""
    import libs.store.message_store  # noqa: F401  (the codec's and the store's compiled modules: describe() names them)

    return f"petrel hot modules: {describe()}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Figures a test recorded with `record_property("fuzz", ...)` (the schemathesis run's counts), one line each."""
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == "fuzz" and getattr(report, "when", "") == "call":
                    terminalreporter.write_line(f"{report.nodeid}: {value}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that start a JVM carry the `spark` marker (tests.support.markers): `make test-fast` leaves them out."""
    for item in items:
        if starts_spark(item.path):
            item.add_marker(pytest.mark.spark)
