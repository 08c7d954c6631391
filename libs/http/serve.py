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

`serve_together` serves several apps in one process and one event loop, each on its own port
(colocated mode, deploy.colocated: the gateway and its broker): started in order, each up
(lifespan started, port bound) before the next, and stopped in the reverse order, each
server's responses in flight finished before the next one stops (the gateway's calls to
the broker end before the broker flushes and closes).

A stop signal (SIGTERM, Ctrl-C) that comes while an app is still starting ends its start:
uvicorn waits for a lifespan's start-up whatever signal comes, and a broker waiting for
etcd, or for the controller to name its role, would hold `petrel down` until its kill.
The start-up's own cleanup runs (its `finally` blocks, at the await it was at), and the
process exits on the signal as after a served run.

The garbage collector: a service's objects that live for its whole life are
frozen after start-up, and full collections are made rarer, so that a
collection does not stop a busy gateway for 50-80 ms (measured by the consumer
benchmark as the latency tail).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import resource
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI
from prometheus_client import Counter
from starlette.types import Lifespan

from libs.compiled import describe
from libs.http.connection_limits import ConnectionLimits, Refused, limited_protocol
from libs.http.shared_port import shared_port_sockets
from libs.http.stopping import STOP_SERVER, announce_stopping, stop_signalled
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
    _set_up_process(settings, settings.max_connections)
    server = _server(app, settings)
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


@dataclass(frozen=True, slots=True)
class Served:
    """One of the apps `serve_together` serves."""

    app: FastAPI
    settings: ServiceSettings
    started: Callable[[dict[str, Any]], None] | None = None
    """told the lifespan's state once the app is up, before the next app starts (what calls it in-process need)"""


def serve_together(served: Sequence[Served]) -> None:
    """Serve every app in this process, on one event loop, until a signal stops them all (SIGTERM, Ctrl-C);
    the first app's settings say how the process logs."""
    _set_up_process(served[0].settings, sum(one.settings.max_connections for one in served))
    servers = [_server(one.app, one.settings) for one in served]

    def stop_all() -> None:
        for server in servers:
            server.should_exit = True

    for one in served:
        setattr(one.app.state, STOP_SERVER, stop_all)
    with _signals_stop(servers), asyncio.Runner(loop_factory=servers[0].config.get_loop_factory()) as runner:
        runner.run(_serve_in_order(servers, served))


async def _serve_in_order(servers: list[StoppingServer], served: Sequence[Served]) -> None:
    running: list[StoppingServer] = []
    try:
        for server, one in zip(servers, served, strict=True):
            server.config.load()
            server.lifespan = server.config.lifespan_class(server.config)
            await server.startup()  # a failed lifespan or bind exits (SystemExit): the finally stops the others
            running.append(server)
            if server.should_exit:
                return
            if one.started is not None:
                one.started(server.lifespan.state)
        await asyncio.gather(*(server.main_loop() for server in running))
    finally:
        for server in reversed(running):
            if server.started:
                await server.shutdown()


@contextlib.contextmanager
def _signals_stop(servers: list[StoppingServer]) -> Iterator[None]:
    """SIGINT and SIGTERM stop every server (a second Ctrl-C without waiting for responses); once they have
    stopped, the signal is raised again, as uvicorn does for one server (`petrel serve` exits on it)."""
    caught: list[int] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        force = bool(caught) and signum == signal.SIGINT
        caught.append(signum)
        for server in servers:
            server.should_exit = True
            server.force_exit = server.force_exit or force
            server.stop_starting()

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for handled, handler in previous.items():
            signal.signal(handled, handler)
    for again in reversed(caught):
        signal.raise_signal(again)


def _set_up_process(settings: ServiceSettings, max_connections: int) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))  # not a line per call
    _allow_open_files(max_connections + OTHER_OPEN_FILES)
    log.info("%s", describe())  # the app is built: the hot modules it uses are imported, compiled or plain


def _server(app: FastAPI, settings: ServiceSettings) -> StoppingServer:
    app.router.lifespan_context = _frozen_after_start(_stoppable_start(app.router.lifespan_context))
    return StoppingServer(server_config(app, settings))


class StoppingServer(uvicorn.Server):
    """uvicorn's server, which tells the app it is stopping before it waits for the responses in flight, and ends
    an app's start when a stop signal comes during it (`stop_starting`)."""

    _loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        signalled = stop_signalled(self.config.app)
        if self.should_exit:  # a signal came before there was a loop to tell
            self.stop_starting()
        quiet = _QuietStoppedStart(signalled)
        uvicorn_log = logging.getLogger("uvicorn.error")
        uvicorn_log.addFilter(quiet)
        try:
            await super().startup(sockets)
        except SystemExit:  # uvicorn's exit for a failed start (3): a stop is not a failure
            if not signalled.is_set():
                raise
        finally:
            uvicorn_log.removeFilter(quiet)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self.stop_starting()

    def stop_starting(self) -> None:
        """A stop was asked for: if the app is still starting, its start ends (from a signal handler, any thread)."""
        if not self.started and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self._loop.call_soon_threadsafe(stop_signalled(self.config.app).set)

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


class _QuietStoppedStart(logging.Filter):
    """uvicorn logs a start ended by a stop signal as a failed one (the traceback, 'Application startup failed'):
    the service's own warning says it instead."""

    def __init__(self, signalled: asyncio.Event) -> None:
        super().__init__()
        self.signalled = signalled

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.signalled.is_set() and record.levelno >= logging.ERROR)


class StoppedWhileStarting(Exception):
    """A stop signal came while the app was starting: it stopped before serving."""


def _stoppable_start(lifespan: Lifespan[Any]) -> Lifespan[Any]:
    """`lifespan`, whose start is cancelled when `stop_signalled(app)` is set before it ends (StoppedWhileStarting,
    once the start's own cleanup has run); once started, the signal no longer reaches it."""

    @contextlib.asynccontextmanager
    async def stoppable(app: FastAPI) -> AsyncIterator[Any]:
        signalled, starting = stop_signalled(app), asyncio.current_task()
        assert starting is not None

        async def watch() -> None:
            await signalled.wait()
            starting.cancel()

        watcher = asyncio.create_task(watch(), name="stop-while-starting")
        context = lifespan(app)
        try:
            state = await context.__aenter__()
        except asyncio.CancelledError:
            if not signalled.is_set():
                raise
            starting.uncancel()
            log.warning("a stop signal came while the service was starting: it stopped before serving")
            raise StoppedWhileStarting("stopped by a signal while starting") from None
        finally:
            watcher.cancel()  # no await between the start's end and here: the watcher cannot cancel past it
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_exit(context)
            yield state

    return stoppable


def _frozen_after_start(lifespan: Lifespan[Any]) -> Lifespan[Any]:
    @contextlib.asynccontextmanager
    async def frozen(app: FastAPI) -> AsyncIterator[Any]:
        async with lifespan(app) as state:
            gc.collect()
            gc.freeze()
            gc.set_threshold(*GC_THRESHOLDS)
            yield state

    return frozen
