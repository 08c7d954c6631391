"""Running a service app under uvicorn (uvloop, httptools), as every `__main__` does.

Idle keep-alive connections are kept longer by the server (75 s) than by our
internal client (30 s, libs.http.client): the client always drops a connection
first, so it never writes a request into one the server is closing (a reset
that a non-idempotent call could not retry).

Connection limits (header size and time, open connections: libs.http.connection_limits)
are uvicorn's protocol's, set from the service's settings; a connection they refuse or
close is counted in `petrel_http_connections_refused_total{reason=...}`. The process's
open-file limit is raised to fit `max_connections`, as far as its hard limit allows.

With `reuse_port`, the service opens its listening sockets itself, with SO_REUSEPORT
(libs.http.shared_port), so that several processes of it (the gateway's workers,
`petrel up --gateway-workers N`) listen on one port and the kernel spreads connections
among them; each process keeps its own limits, connections and garbage collector.

The garbage collector: a service's objects that live for its whole life are
frozen after start-up, and full collections are made rarer, so that a
collection does not stop a busy gateway for 50-80 ms (measured by the consumer
benchmark as the latency tail).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import resource
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from fastapi import FastAPI
from prometheus_client import Counter
from starlette.types import Lifespan

from libs.compiled import describe
from libs.http.connection_limits import ConnectionLimits, Refused, limited_protocol
from libs.http.shared_port import shared_port_sockets
from libs.http.stopping import STOP_SERVER, announce_stopping
from libs.settings import ServiceSettings

log = logging.getLogger(__name__)

KEEP_ALIVE_SECONDS = 75
GC_THRESHOLDS = (50_000, 20, 100)
OTHER_OPEN_FILES = 1024
"""Files a service holds besides its clients' connections: store segments, calls to other services, logs."""
STARTUP_FAILURE = 3
"""uvicorn's exit code when it cannot bind"""


def serve(app: FastAPI, settings: ServiceSettings, *, reuse_port: bool = False) -> None:
    """Serve `app` until a signal stops it; `reuse_port`: on a port other processes may share (SO_REUSEPORT)."""
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))  # not a line per call
    log.info("%s", describe())  # the app is built: the hot modules it uses are imported, compiled or plain
    app.router.lifespan_context = _frozen_after_start(app.router.lifespan_context)
    _allow_open_files(settings.max_connections + OTHER_OPEN_FILES)
    server = StoppingServer(server_config(app, settings))
    setattr(app.state, STOP_SERVER, lambda: setattr(server, "should_exit", True))
    if not reuse_port:
        server.run()
        return
    try:
        sockets = shared_port_sockets(settings.host, settings.port)
    except OSError as exc:
        log.error("%s", exc.strerror or exc)
        sys.exit(STARTUP_FAILURE)
    log.info("serving on %s:%d, a port shared with other processes (SO_REUSEPORT)", settings.host, settings.port)
    server.run(sockets=sockets)


class StoppingServer(uvicorn.Server):
    """uvicorn's server, which tells the app it is stopping before it waits for the responses in flight."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        announce_stopping(self.config.app)
        await super().shutdown(sockets)


def server_config(app: FastAPI, settings: ServiceSettings) -> uvicorn.Config:
    """How uvicorn serves a service: uvloop, httptools under the connection limits, keep-alive."""
    return uvicorn.Config(
        app,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        loop="uvloop",
        http=limited_protocol(ConnectionLimits.of(settings), _refusals_counter(app)),
        timeout_graceful_shutdown=10,
    )


def _refusals_counter(app: FastAPI) -> Refused:
    """Counts refusals in the app's registry (`service_app`'s), when it has one."""
    metrics = getattr(app.state, "metrics", None)
    if metrics is None:
        return lambda reason: None
    counter = Counter(
        "petrel_http_connections_refused",
        "Connections refused or closed by a connection limit",
        ["service", "reason"],
        registry=metrics.registry,
    )
    service = metrics.service

    def refused(reason: str) -> None:
        counter.labels(service, reason).inc()

    return refused


def _allow_open_files(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    if raised < wanted:
        log.warning("open files are limited to %d (hard limit): fewer than max_connections can be open", raised)


def _frozen_after_start(lifespan: Lifespan[Any]) -> Lifespan[Any]:
    @contextlib.asynccontextmanager
    async def frozen(app: FastAPI) -> AsyncIterator[Any]:
        async with lifespan(app) as state:
            gc.collect()
            gc.freeze()
            gc.set_threshold(*GC_THRESHOLDS)
            yield state

    return frozen
