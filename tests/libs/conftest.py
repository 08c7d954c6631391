"""Fixtures for tests/libs: a real uvicorn server on loopback, for the internal HTTP client and the limits."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp

from libs.http.app import service_app
from libs.http.serve import server_config
from libs.settings import ServiceSettings
from tests.support.raw_http import Serve
from tests.support.serving import ServeApp, ServedApp, start_app, start_config


@pytest.fixture
def serve_app() -> Iterator[ServeApp]:
    running: list[ServedApp] = []

    def serve(app: ASGIApp) -> str:
        running.append(start_app(app))
        return running[-1].url

    yield serve
    for served in running:
        served.stop()


@contextlib.asynccontextmanager
async def no_resources(app: FastAPI) -> AsyncIterator[None]:
    yield


def _bind_echo(request: Request) -> dict[str, Any]:
    return {"request": request}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """A service "testsvc" whose `POST /echo` answers its body's length (a hot route unless `hot_path=False`)."""
    running: list[ServedApp] = []

    def start(**settings: Any) -> ServedApp:
        config = ServiceSettings(data_dir=tmp_path, events_enabled=False, log_level="warning", **settings)
        app = service_app("testsvc", config, lifespan=no_resources, hot_routes={"echo": _bind_echo})

        @app.post("/echo", operation_id="echo")
        async def echo(request: Request) -> JSONResponse:
            return JSONResponse({"length": len(await request.body())})

        running.append(start_config(server_config(app, config)))
        return running[-1]

    yield start
    for served in running:
        served.stop()
