"""A raw HTTP/1.1 client over a plain socket, for tests of what a served service does with connections.

A test can send what no HTTP library would (a 1 MiB header, half a request line, a body
that never comes) and see what the server does with the socket: answers, EOF, reset.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

from tests.support.serving import ServedApp

WAIT = 5.0
"""Seconds a client waits for an answer or a close before the test fails."""

Serve = Callable[..., ServedApp]
"""Serves a small service app as `petrel up` would (libs.http.serve's config), with the settings given."""


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)


def connect(served: ServedApp) -> socket.socket:
    return socket.create_connection(("127.0.0.1", served.port), timeout=WAIT)


def request(path: str, method: str = "GET", body: bytes = b"", headers: str = "") -> bytes:
    length = f"content-length: {len(body)}\r\n" if body or method == "POST" else ""
    length += "content-type: application/json\r\n" if body else ""
    return f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{headers}{length}\r\n".encode() + body


def read_response(reader: Any) -> Response:
    """One response off a connection's reader (responses here always have a content-length)."""
    status_line = reader.readline()
    assert status_line, "the connection closed before an answer"
    headers: dict[str, str] = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    return Response(int(status_line.split()[1]), headers, reader.read(int(headers["content-length"])))


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed the connection (EOF or reset) with nothing more to read."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def closes(reader: Any) -> bool:
    """True when the server closes the connection (EOF or reset) within the socket's timeout, with nothing more sent."""
    try:
        return bool(reader.read() == b"")
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def get(served: ServedApp, path: str) -> Response:
    with connect(served) as sock, sock.makefile("rb") as reader:
        sock.sendall(request(path))
        return read_response(reader)


def refusals(served: ServedApp, reason: str, service: str = "testsvc") -> float:
    """How many connections the served service refused or closed for `reason` (its metric)."""
    prefix = f'petrel_http_connections_refused_total{{reason="{reason}",service="{service}"}} '
    for line in get(served, "/metrics").body.decode().splitlines():
        if line.startswith(prefix):
            return float(line.removeprefix(prefix))
    return 0.0
