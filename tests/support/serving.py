"""Serving an app on a loopback port from a background thread, for in-process service tests.

Used where the code under test calls another service over real HTTP (the
aiohttp internal client cannot call an ASGI app in-process). The socket is
bound before the server starts, so no other test can take the port meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import uvicorn
from starlette.types import ASGIApp

from libs.http.serve import KEEP_ALIVE_SECONDS
from libs.http.stopping import announce_stopping

STARTUP_TIMEOUT = 30.0
"""A bound on a failure only (an app that never starts): a started app returns at once. 5 s was passed on a
slow day, with the two cores shared by three test runs (a warm-up request timed out)."""

ServeApp = Callable[[ASGIApp], str]
"""Starts an ASGI app under uvicorn on loopback; answers its base URL (the `serve_app` fixture)."""


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range.

    A port the kernel hands out for `bind(0)` or an outgoing connection can be taken by
    another process (a Spark JVM of the other test worker binds many) between this
    answer and the server's bind; below that range only a deliberate bind takes it.
    """
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(10_000, low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def bound_socket(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it. Without it, asyncio's loop (unlike uvloop, which `serve` uses)
    # leaves Nagle on, and each answer written in two parts waits ~40 ms for the peer's delayed ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return sock


class _PromptServer(uvicorn.Server):
    """uvicorn's server, which notices a stop at once rather than at its next 0.1 s tick."""

    _loop: asyncio.AbstractEventLoop | None = None
    _stopping: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864_000  # a tick a second: the Date header's pace
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), 1.0)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's, less its 0.1 s pause for open connections when there are none; the app hears of it first."""
        announce_stopping(self.config.app)
        if self.server_state.connections or self.server_state.tasks:
            await super().shutdown(sockets)
            return
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()

    def stop_soon(self) -> None:
        """From any thread: stop serving now."""
        self.should_exit = True
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):  # its loop has closed already
                self._loop.call_soon_threadsafe(self._stopping.set)


@dataclass
class ServedApp:
    app: ASGIApp
    port: int
    server: _PromptServer
    thread: threading.Thread
    sock: socket.socket

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def stop(self) -> None:
        self.server.stop_soon()
        self.thread.join(15)
        self.sock.close()
        if self.thread.is_alive():
            raise RuntimeError(f"the app on port {self.port} did not stop")


def start_app(app: ASGIApp, port: int = 0, tls: tuple[Path, Path] | None = None) -> ServedApp:
    """`tls`: (certificate, key) files: serve https (the URL stays http://: callers name their own host)."""
    certificate, key = tls if tls is not None else (None, None)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        loop="asyncio",
        timeout_graceful_shutdown=5,  # as libs.http.serve bounds it: a connection a test left half-open
        # as libs.http.serve keeps them: uvicorn's default (5 s) closed idle connections the lean transport keeps
        # for 30 s, so a POST on one could meet the close ("closed before the answer was whole")
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        ssl_certfile=certificate,
        ssl_keyfile=key,
    )
    return start_config(config, port, warm_up=tls is None)


def start_config(
    config: uvicorn.Config, port: int = 0, warm_up: bool = True, sock: socket.socket | None = None
) -> ServedApp:
    """Serves as `config` says (its loop and protocol: libs.http.serve's, say), on a loopback port (or on `sock`,
    bound and not yet listening: a port shared with other servers, say)."""
    sock = sock or bound_socket(port)
    port = int(sock.getsockname()[1])
    server = _PromptServer(config)

    def run() -> None:
        with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
            runner.run(server.serve(sockets=[sock]))

    thread = threading.Thread(target=run, name=f"serve-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError(f"the app on port {port} did not start within {STARTUP_TIMEOUT} s")
        time.sleep(0.005)
    if warm_up:
        _warm_up(port)
    return ServedApp(cast(ASGIApp, config.app), port, server, thread, sock)


def _warm_up(port: int) -> None:
    """One request that walks every route, so FastAPI builds its lazy route state now.

    FastAPI builds a router's route state on first use, with pydantic schema
    generation that is not safe across threads: two apps served from threads
    of one test process, first used at the same instant, can race
    (AttributeError: __pydantic_core_schema__). Separate processes, as in
    production, never share it.
    """
    with contextlib.suppress(urllib.error.HTTPError):  # a 404, after matching against every route
        urllib.request.urlopen(f"http://127.0.0.1:{port}/__warm_up__", timeout=STARTUP_TIMEOUT).close()


@contextlib.contextmanager
def serving(app: ASGIApp, port: int = 0, tls: tuple[Path, Path] | None = None) -> Iterator[ServedApp]:
    served = start_app(app, port, tls)
    try:
        yield served
    finally:
        served.stop()
