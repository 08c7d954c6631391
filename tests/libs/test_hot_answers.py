"""Hot routes answered straight from uvicorn's request cycle (libs.http.hot_answers), on a served service.

The service of the `serve` fixture answers `POST /echo` with its body's length, as a hot route
unless `hot_path=False` (then FastAPI answers it, through the ASGI app): both must put the same
bytes on the wire, keep or close the connection alike, and the hot one must not pass through
the app at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from libs.http.app import ServiceApp, service_app
from libs.http.serve import server_config
from libs.settings import ServiceSettings
from tests.support.raw_http import Serve, closes, connect, read_response, request
from tests.support.serving import start_config


@pytest.fixture
def app_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The /echo requests that went through the service app's ASGI entry (ServiceApp.__call__)."""
    calls: list[str] = []
    through_app = ServiceApp.__call__

    async def counted(self: ServiceApp, scope: dict, receive: object, send: object) -> None:  # type: ignore[type-arg]
        if scope["type"] == "http" and scope["path"] == "/echo":
            calls.append(scope["path"])
        await through_app(self, scope, receive, send)  # type: ignore[arg-type]

    monkeypatch.setattr(ServiceApp, "__call__", counted)
    return calls


def _exchange(serve: Serve, raw: bytes, answers: int, **settings: object) -> tuple[list[bytes], bool]:
    """Each answer's head (its date left out) and body, and whether the server closed the connection after."""
    served = serve(**settings)
    with connect(served) as sock, sock.makefile("rb") as reader:
        sock.sendall(raw)
        heads: list[bytes] = []
        for _ in range(answers):
            status_line = reader.readline()
            lines = [status_line]
            while (line := reader.readline()) not in (b"\r\n", b""):
                if not line.lower().startswith(b"date:"):
                    lines.append(line)
            length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length"))
            heads.append(b"".join(lines) + b"|" + reader.read(length))
        sock.settimeout(0.5)
        return heads, closes(reader)


def test_a_hot_answer_is_the_bytes_fastapi_puts_on_the_wire_and_skips_the_app(
    serve: Serve, app_calls: list[str]
) -> None:
    echo = request("/echo", "POST", b'{"a": 1}')
    hot, hot_closed = _exchange(serve, echo, 1)
    assert app_calls == [], "the hot route went through the service app"

    plain, plain_closed = _exchange(serve, echo, 1, hot_path=False)
    assert app_calls == ["/echo"]
    assert hot == plain
    assert hot[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert hot[0].endswith(b'|{"length":8}')
    assert (hot_closed, plain_closed) == (False, False), "a kept-alive connection was closed"


@pytest.mark.parametrize("hot_path", [True, False], ids=["hot", "fastapi"])
def test_pipelined_hot_requests_are_answered_in_order_on_one_connection(serve: Serve, hot_path: bool) -> None:
    bodies = [b"{}", b'{"b": 22}', b'{"c": 333}']
    heads, closed = _exchange(serve, b"".join(request("/echo", "POST", b) for b in bodies), 3, hot_path=hot_path)
    assert [head.rpartition(b"|")[2] for head in heads] == [b'{"length":2}', b'{"length":9}', b'{"length":10}']
    assert not closed


@pytest.mark.parametrize("hot_path", [True, False], ids=["hot", "fastapi"])
def test_a_request_that_says_close_is_answered_with_close_and_the_connection_closed(
    serve: Serve, hot_path: bool
) -> None:
    echo = request("/echo", "POST", b"{}", headers="connection: close\r\n")
    (head,), closed = _exchange(serve, echo, 1, hot_path=hot_path)
    assert b"\r\nconnection: close\r\n" in head
    assert closed


def test_an_http_1_0_request_is_answered_and_closed(serve: Serve) -> None:
    served = serve()
    with connect(served) as sock, sock.makefile("rb") as reader:
        sock.sendall(b"POST /echo HTTP/1.0\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
        answer = read_response(reader)
        assert (answer.status, answer.json(), answer.headers.get("connection")) == (200, {"length": 2}, "close")
        assert closes(reader)


@pytest.mark.parametrize("hot_path", [True, False], ids=["hot", "fastapi"])
def test_a_refusal_from_the_headers_says_close_when_the_body_did_not_come(serve: Serve, hot_path: bool) -> None:
    """A body of a media type the route does not take is refused (415) before it is read: the answer says close
    (the unread body could not be told from a next request), and the connection is closed."""
    served = serve(hot_path=hot_path)
    with connect(served) as sock, sock.makefile("rb") as reader:
        sock.sendall(
            b"POST /echo HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: text/plain\r\ncontent-length: 64\r\n\r\n"
        )
        answer = read_response(reader)
        assert (answer.status, answer.headers.get("connection")) == (415, "close")
        assert answer.headers["content-type"] == "application/problem+json"
        assert closes(reader)


def test_a_hot_request_relayed_by_a_trusted_proxy_is_seen_from_the_client_the_proxy_names(tmp_path: Path) -> None:
    """uvicorn takes the client's address from X-Forwarded-For when the proxy is on loopback (its default trust):
    the audit log's `remote` is that address. A hot answer must not lose it by skipping the proxy-headers step."""
    settings = ServiceSettings(data_dir=tmp_path, events_enabled=False, log_level="warning")
    app = service_app("testsvc", settings, lifespan=_no_resources, hot_routes={"whoami": _bind_request})

    @app.post("/whoami", operation_id="whoami")
    async def whoami(request: Request) -> JSONResponse:
        return JSONResponse({"client": request.client.host if request.client else None})

    served = start_config(server_config(app, settings))
    try:
        with connect(served) as sock, sock.makefile("rb") as reader:
            sock.sendall(request("/whoami", "POST", b"{}", headers="x-forwarded-for: 203.0.113.7\r\n"))
            relayed = read_response(reader).json()
            sock.sendall(request("/whoami", "POST", b"{}"))
            direct = read_response(reader).json()
    finally:
        served.stop()
    assert relayed == {"client": "203.0.113.7"}
    assert direct == {"client": "127.0.0.1"}


@contextlib.asynccontextmanager
async def _no_resources(app: FastAPI) -> AsyncIterator[None]:
    yield


def _bind_request(request: Request) -> dict[str, Any]:
    return {"request": request}
