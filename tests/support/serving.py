"""Serving an app on a loopback port from a background thread, for in-process service tests.

Used where the code under test calls another service over real HTTP (the
aiohttp internal client cannot call an ASGI app in-process).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServedApp:
    app: FastAPI
    port: int
    server: uvicorn.Server
    thread: threading.Thread

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        if self.thread.is_alive():
            raise RuntimeError(f"the app on port {self.port} did not stop")


def start_app(app: FastAPI, port: int | None = None) -> ServedApp:
    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", loop="asyncio")
    server = uvicorn.Server(config)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(server.serve())
        except BaseException as exc:  # noqa: BLE001 - reported by start_app below
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"serve-{port}", daemon=True)
    thread.start()
    for _ in range(500):
        if server.started or failure or not thread.is_alive():
            break
        threading.Event().wait(0.01)
    if not server.started:
        raise RuntimeError(f"the app on port {port} did not start: {failure or 'timeout'}")
    return ServedApp(app, port, server, thread)


@contextlib.contextmanager
def serving(app: FastAPI, port: int | None = None) -> Iterator[ServedApp]:
    served = start_app(app, port)
    try:
        yield served
    finally:
        served.stop()
