"""Connection limits on a served service (libs.http.connection_limits), through libs.http.serve's own config.

Real uvicorn, uvloop and httptools on a loopback port; the clients are raw sockets, so a
test can send what no HTTP library would (a 1 MiB header, half a request line).
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request

from libs.errors import PROBLEM_TYPE_BASE
from libs.http.app import service_app
from libs.http.serve import server_config
from libs.settings import ServiceSettings
from tests.support.serving import ServedApp, start_config
from tests.support.waiting import wait_until

WAIT = 5.0
"""Seconds a client waits for an answer or a close before the test fails."""

Serve = Callable[..., ServedApp]


@contextlib.asynccontextmanager
async def no_resources(app: FastAPI) -> AsyncIterator[None]:
    yield


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """Serves a small service app under the limits given (settings fields), as `petrel up` would."""
    running: list[ServedApp] = []

    def start(**limits: Any) -> ServedApp:
        settings = ServiceSettings(data_dir=tmp_path, events_enabled=False, log_level="warning", **limits)
        app = service_app("testsvc", settings, lifespan=no_resources)

        @app.post("/echo")
        async def echo(request: Request) -> dict[str, int]:
            return {"length": len(await request.body())}

        running.append(start_config(server_config(app, settings)))
        return running[-1]

    yield start
    for served in running:
        served.stop()


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


def get(served: ServedApp, path: str) -> Response:
    with connect(served) as sock, sock.makefile("rb") as reader:
        sock.sendall(request(path))
        return read_response(reader)


def refusals(served: ServedApp, reason: str) -> float:
    prefix = f'petrel_http_connections_refused_total{{reason="{reason}",service="testsvc"}} '
    for line in get(served, "/metrics").body.decode().splitlines():
        if line.startswith(prefix):
            return float(line.removeprefix(prefix))
    return 0.0


def test_a_megabyte_header_is_answered_431_and_its_connection_closed(serve: Serve) -> None:
    served = serve(max_header_bytes=16 * 1024)
    with connect(served) as sock, sock.makefile("rb") as reader:
        sock.sendall(request("/healthz", headers=f"x-padding: {'a' * 1024 * 1024}\r\n"))
        answer = read_response(reader)
        assert reader.read() == b"", "the connection stays open after the 431"
    assert answer.status == 431
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["connection"] == "close"
    assert answer.json() == {
        "type": PROBLEM_TYPE_BASE + "request-header-too-large",
        "title": "Request header fields too large",
        "status": 431,
        "detail": "the request line and headers pass 16384 bytes",
        "limit": 16384,
    }
    assert get(served, "/healthz").status == 200
    assert refusals(served, "header_too_large") == 1


def test_headers_just_under_the_bound_and_a_large_body_are_served(serve: Serve) -> None:
    served = serve(max_header_bytes=16 * 1024)
    with connect(served) as sock, sock.makefile("rb") as reader:
        sock.sendall(request("/healthz", headers=f"x-padding: {'a' * 15 * 1024}\r\n"))
        assert read_response(reader).status == 200
        sock.sendall(request("/echo", method="POST", body=b'"' + b"x" * 199_998 + b'"'))
        answer = read_response(reader)
    assert (answer.status, answer.json()) == (200, {"length": 200_000})


def test_pipelined_requests_count_the_bound_per_request(serve: Serve) -> None:
    served = serve(max_header_bytes=2048)
    one = request("/healthz", headers=f"x-padding: {'a' * 1500}\r\n")
    with connect(served) as sock, sock.makefile("rb") as reader:
        sock.sendall(one * 20)  # 20 requests of ~1.5 KiB each: 30 KiB in few reads
        statuses = [read_response(reader).status for _ in range(20)]
    assert statuses == [200] * 20


def test_many_requests_share_one_keep_alive_connection(serve: Serve) -> None:
    served = serve(header_timeout_seconds=0.5)
    with connect(served) as sock, sock.makefile("rb") as reader:
        for _ in range(100):
            sock.sendall(request("/healthz"))
            assert read_response(reader).status == 200
        with connect(served) as silent:  # opened after the last answer: closed once the idle one has been idle
            assert closed_by_server(silent)
        sock.sendall(request("/healthz"))
        assert read_response(reader).status == 200, "an idle keep-alive connection was cut by the header timeout"


def test_half_a_request_line_is_answered_408_after_the_header_timeout(serve: Serve) -> None:
    served = serve(header_timeout_seconds=0.5)
    with connect(served) as sock, sock.makefile("rb") as reader:
        sock.sendall(b"GET /heal")
        assert get(served, "/healthz").status == 200, "the server stopped answering while a client stalled"
        answer = read_response(reader)
        assert reader.read() == b""
    assert answer.status == 408
    assert answer.json() == {
        "type": PROBLEM_TYPE_BASE + "request-header-timeout",
        "title": "Request header timeout",
        "status": 408,
        "detail": "the request headers did not come within 0.5 s",
        "limit": 0.5,
    }
    assert refusals(served, "header_timeout") == 1


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(serve: Serve) -> None:
    served = serve(header_timeout_seconds=0.5)
    with connect(served) as sock:
        assert sock.recv(1024) == b""


def test_connections_past_the_limit_are_closed_at_once(serve: Serve) -> None:
    served = serve(max_connections=3)
    with contextlib.ExitStack() as held:
        readers = []
        for _ in range(3):
            sock = held.enter_context(connect(served))
            readers.append((sock, held.enter_context(sock.makefile("rb"))))
            sock.sendall(request("/healthz"))
            assert read_response(readers[-1][1]).status == 200
        with connect(served) as extra:
            assert closed_by_server(extra), "a connection past max_connections was kept"
        sock, reader = readers[0]
        sock.sendall(request("/metrics"))
        metrics = read_response(reader).body.decode()
    assert 'petrel_http_connections_refused_total{reason="too_many_connections",service="testsvc"} 1.0' in metrics
    wait_until(lambda: _answers(served), "the service serves a new connection once the others closed")


def _answers(served: ServedApp) -> bool:
    try:
        return get(served, "/healthz").status == 200
    except (AssertionError, ConnectionError):
        return False
