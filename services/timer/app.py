"""The timer service's process frame: health, readiness and metrics, under `petrel up`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI

from libs.http.app import service_app
from services.timer.settings import TimerSettings


def create_app(settings: TimerSettings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield

    return service_app("timer", settings, lifespan=lifespan, description="Delay levels and the timer wheel.")
