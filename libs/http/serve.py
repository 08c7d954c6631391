"""Running a service app under uvicorn (uvloop, httptools), as every `__main__` does."""

from __future__ import annotations

import logging

import uvicorn
from fastapi import FastAPI

from libs.settings import ServiceSettings


def serve(app: FastAPI, settings: ServiceSettings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        loop="uvloop",
        http="httptools",
        timeout_graceful_shutdown=10,
    )
