"""Several servers on one port (libs.http.shared_port, SO_REUSEPORT), as the gateway's workers run.

Real uvicorn, uvloop and httptools under libs.http.serve's config, each server in a thread
of its own; a fresh connection is a new choice for the kernel, so enough of them reach both.
"""

from __future__ import annotations

import contextlib
import json
import socket
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from libs.http.app import service_app
from libs.http.serve import STARTUP_FAILURE, serve, server_config
from libs.http.shared_port import shared_port_sockets
from libs.settings import ServiceSettings
from tests.support.serving import ServedApp, free_port, start_config

FRESH_CONNECTIONS = 64
"""Connections opened to see every server answer: with two, one is missed with odds of 2^-63."""


@contextlib.asynccontextmanager
async def no_resources(app: FastAPI) -> AsyncIterator[None]:
    yield


def serve_on_shared_port(name: str, port: int, tmp_path: Path) -> ServedApp:
    settings = ServiceSettings(port=port, data_dir=tmp_path, events_enabled=False, log_level="warning")
    app = service_app(name, settings, lifespan=no_resources)
    (sock,) = shared_port_sockets("127.0.0.1", port)
    return start_config(server_config(app, settings), port, sock=sock)


def who_answers(port: int) -> str:
    """The service name /healthz answers, over a fresh connection."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
        return str(json.loads(response.read())["service"])


def test_servers_sharing_a_port_each_take_connections_and_one_stopping_leaves_the_port_served(
    tmp_path: Path,
) -> None:
    port = free_port()
    first = serve_on_shared_port("first", port, tmp_path)
    second = serve_on_shared_port("second", port, tmp_path)
    try:
        answered = {who_answers(port) for _ in range(FRESH_CONNECTIONS)}
        assert answered == {"first", "second"}, "the kernel did not spread connections over both servers"

        second.stop()
        assert {who_answers(port) for _ in range(FRESH_CONNECTIONS)} == {"first"}
    finally:
        first.stop()
        second.stop()


def test_a_port_held_by_a_process_that_does_not_share_it_is_refused_naming_the_address() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot share 127.0.0.1:{port} \\(SO_REUSEPORT\\): Address already in use"):
            shared_port_sockets("127.0.0.1", port)


def test_shared_sockets_are_bound_but_not_listening_until_the_server_starts() -> None:
    port = free_port()
    (sock,) = shared_port_sockets("127.0.0.1", port)
    with sock, pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_serve_with_reuse_port_exits_as_uvicorn_does_when_the_port_is_held(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        settings = ServiceSettings(port=port, data_dir=tmp_path, events_enabled=False, log_level="warning")
        app = service_app("held", settings, lifespan=no_resources)

        with pytest.raises(SystemExit) as exited:
            serve(app, settings, reuse_port=True)

    assert exited.value.code == STARTUP_FAILURE
    assert f"cannot share 127.0.0.1:{port} (SO_REUSEPORT)" in caplog.text
