"""Running a service app under uvicorn (uvloop, httptools), as every `__main__` does.

Idle keep-alive connections are kept longer by the server (75 s) than by our
internal client (30 s, libs.http.client): the client always drops a connection
first, so it never writes a request into one the server is closing (a reset
that a non-idempotent call could not retry).

The garbage collector: a service's objects that live for its whole life are
frozen after start-up, and full collections are made rarer, so that a
collection does not stop a busy gateway for 50-80 ms (measured by the consumer
benchmark as the latency tail).
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from fastapi import FastAPI
from starlette.types import Lifespan

from libs.settings import ServiceSettings

KEEP_ALIVE_SECONDS = 75
GC_THRESHOLDS = (50_000, 20, 100)


def serve(app: FastAPI, settings: ServiceSettings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app.router.lifespan_context = _frozen_after_start(app.router.lifespan_context)
    uvicorn.run(
        app,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        loop="uvloop",
        http="httptools",
        timeout_graceful_shutdown=10,
    )


def _frozen_after_start(lifespan: Lifespan[Any]) -> Lifespan[Any]:
    @contextlib.asynccontextmanager
    async def frozen(app: FastAPI) -> AsyncIterator[Any]:
        async with lifespan(app) as state:
            gc.collect()
            gc.freeze()
            gc.set_threshold(*GC_THRESHOLDS)
            yield state

    return frozen
