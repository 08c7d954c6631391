"""Fixtures for tests/libs: a real uvicorn server on loopback for the internal HTTP client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.types import ASGIApp

from tests.support.serving import ServeApp, ServedApp, start_app


@pytest.fixture
def serve_app() -> Iterator[ServeApp]:
    running: list[ServedApp] = []

    def serve(app: ASGIApp) -> str:
        running.append(start_app(app))
        return running[-1].url

    yield serve
    for served in running:
        served.stop()
