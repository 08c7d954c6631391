"""Slow clients on a served service (libs.http.connection_limits): what a body may take, what an early answer closes.

Real uvicorn, uvloop and httptools on a loopback port, as every service runs
(libs.http.serve's config); the clients are raw sockets that stall or trickle, on the hot
path and through FastAPI's stack. A trickling client sleeps between its bytes: that is
what it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from pydantic import SecretStr

from libs.errors import PROBLEM_TYPE_BASE
from libs.http import connection_limits
from tests.support.raw_http import WAIT, Serve, closes, connect, read_response, refusals, request
from tests.support.serving import ServedApp
from tests.support.waiting import eventually, wait_until

TOKEN = "slow-clients-test-cluster-token-0123456789"
AUTH = f"x-petrel-internal-token: {TOKEN}\r\n"
TIMEOUT = 0.5
"""The short header and body timeouts of these tests."""
RATE = 1000
"""Their body_min_rate, bytes a second."""
TRICKLE = 0.05
"""Seconds between a trickling client's bytes: 20 bytes a second, below RATE."""
LINGER = 0.2
"""How long a refused connection's further bytes are read here before it is closed (LINGER_SECONDS, 2 s)."""
CUT_OFF = TIMEOUT + LINGER + 2.0
"""Seconds within which a slow client's connection is gone: its timeout, the lingering close, and slack."""

paths = pytest.mark.parametrize("hot_path", [True, False], ids=["hot-path", "fastapi"])


@pytest.fixture(autouse=True)
def short_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lingering close is a timer these tests wait out: LINGER, not the production 2 s."""
    monkeypatch.setattr(connection_limits, "LINGER_SECONDS", LINGER)


def serve_short(serve: Serve, **settings: object) -> ServedApp:
    limits = {"header_timeout_seconds": TIMEOUT, "body_timeout_seconds": TIMEOUT, "body_min_rate": RATE}
    return serve(internal_token=SecretStr(TOKEN), **{**limits, **settings})


def body_head(length: int, headers: str = "") -> bytes:
    """A POST /echo's line and headers, declaring a JSON body of `length` bytes (none of it)."""
    lines = f"content-type: application/json\r\ncontent-length: {length}\r\n{headers}"
    return f"POST /echo HTTP/1.1\r\nhost: 127.0.0.1\r\n{lines}\r\n".encode()


def connections(served: ServedApp) -> int:
    return len(served.server.server_state.connections)


class PeakConnections(set[object]):
    """A server's set of open connections that remembers the most it held at once.

    Slow clients hold their connections only for their timeouts (a refused one for LINGER):
    polling the count can miss the moment they are all open on a loaded machine.
    """

    peak = 0

    def add(self, connection: object) -> None:
        super().add(connection)
        self.peak = max(self.peak, len(self))


async def count_peak(served: ServedApp) -> PeakConnections:
    """The server's connections in a PeakConnections, once its warm-up request's connection is gone."""

    async def idle() -> bool:
        return connections(served) == 0

    await eventually(idle, "the warm-up request's connection is closed")
    counted = PeakConnections()
    served.server.server_state.connections = counted  # type: ignore[assignment]
    return counted


@contextlib.contextmanager
def held(served: ServedApp) -> Iterator[tuple[socket.socket, object]]:
    with connect(served) as sock, sock.makefile("rb") as reader:
        yield sock, reader


@paths
def test_a_refusal_before_the_body_closes_the_connection(serve: Serve, hot_path: bool) -> None:
    """The report: 401 from the headers, then one more byte; uvicorn's keep-alive timer stopped at that byte."""
    served = serve_short(serve, hot_path=hot_path, body_timeout_seconds=60)
    with held(served) as (sock, reader):
        sock.sendall(body_head(8_000_000))  # no token
        answer = read_response(reader)
        sock.sendall(b"x")
        assert closes(reader), "the connection stays open after a 401 answered before its body"
        wait_until(lambda: connections(served) == 0, "the server lets the socket go", timeout=CUT_OFF)
    assert (answer.status, answer.headers["connection"]) == (401, "close")


@paths
def test_a_whole_request_answered_keeps_its_connection(serve: Serve, hot_path: bool) -> None:
    served = serve_short(serve, hot_path=hot_path)
    with held(served) as (sock, reader):
        sock.sendall(body_head(5, AUTH) + b'"abc"')
        first = read_response(reader)
        sock.sendall(body_head(5) + b'"abc"')  # no token: refused, the body all here
        second = read_response(reader)
        sock.sendall(request("/healthz"))
        third = read_response(reader)
    assert [first.status, second.status, third.status] == [200, 401, 200]
    assert "connection" not in second.headers


@paths
def test_a_body_that_stalls_is_answered_408_and_closed(serve: Serve, hot_path: bool) -> None:
    served = serve_short(serve, hot_path=hot_path)
    with held(served) as (sock, reader):
        sock.sendall(body_head(100, AUTH) + b'"abc')
        answer = read_response(reader)
        assert closes(reader), "the connection stays open after the 408"
    assert (answer.status, answer.headers["connection"]) == (408, "close")
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json() == {
        "type": PROBLEM_TYPE_BASE + "request-body-timeout",
        "title": "Request body timeout",
        "status": 408,
        "detail": f"the request body did not come within 0.5 s, or came slower than {RATE} bytes a second",
        "limit": 0.5,
        "min_rate": RATE,
    }
    assert refusals(served, "body_timeout") == 1


def trickle(sock: socket.socket, byte: bytes, seconds: float) -> float:
    """Sends `byte` every TRICKLE s until the server answers or closes; answers how long it went on."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            sock.sendall(byte)
        except OSError:
            break
        readable, _, _ = select.select([sock], [], [], TRICKLE)
        if readable:
            break
    return time.monotonic() - started


@paths
def test_a_body_trickling_below_the_rate_is_cut_off_while_it_still_trickles(serve: Serve, hot_path: bool) -> None:
    served = serve_short(serve, hot_path=hot_path)
    with held(served) as (sock, reader):
        sock.sendall(body_head(100_000, AUTH))
        trickled = trickle(sock, b"x", WAIT)
        assert trickled < WAIT, f"a body trickled at {1 / TRICKLE:g} bytes a second for {WAIT} s was not cut off"
        answer = read_response(reader)
        assert closes(reader)
    assert answer.status == 408


@paths
def test_a_body_at_the_rate_is_read_whole(serve: Serve, hot_path: bool) -> None:
    served = serve_short(serve, hot_path=hot_path)
    body = b'"' + b"x" * 2998 + b'"'
    with held(served) as (sock, reader):
        sock.sendall(body_head(len(body), AUTH))
        for start in range(0, len(body), 300):  # 3,000 bytes a second, over twice the initial timeout
            sock.sendall(body[start : start + 300])
            time.sleep(0.1)
        answer = read_response(reader)
        sock.sendall(request("/healthz"))
        assert read_response(reader).status == 200, "the connection was not kept after a whole body"
    assert (answer.status, answer.json()) == (200, {"length": 3000})


def test_bytes_that_begin_no_request_do_not_hold_the_connection(serve: Serve) -> None:
    """A CRLF after an answer stops uvicorn's keep-alive timer and begins no request: the header timeout runs."""
    served = serve_short(serve)
    with held(served) as (sock, reader):
        sock.sendall(request("/healthz"))
        assert read_response(reader).status == 200
        sock.sendall(b"\r\n")
        assert closes(reader), "a stray CRLF held the connection open"


@dataclass(frozen=True)
class SlowClient:
    """One way to hold a connection: what is sent at once, the answer read, one byte more, then a trickle."""

    name: str
    opening: bytes
    reads_answer: bool = False
    then: bytes = b""
    trickles: bytes = b""


STALLED_HEADERS = SlowClient("stalled headers", b"POST /echo HTTP/1.1\r\nhost: 127")
TRICKLED_HEADERS = SlowClient("trickled headers", b"POST /echo HTTP/1.1\r\nx-slow: ", trickles=b"a")
REFUSED_THEN_A_BYTE = SlowClient("401, then a byte", body_head(8_000_000), reads_answer=True, then=b"x")
STALLED_BODY = SlowClient("stalled body", body_head(1000, AUTH) + b'"')
TRICKLED_BODY = SlowClient("trickled body", body_head(100_000, AUTH), trickles=b"x")
STRAY_CRLF = SlowClient("a CRLF after an answer", request("/healthz"), reads_answer=True, then=b"\r\n")


class Holder:
    """A slow client holding a connection; it never closes it itself, not even once the server has ended it."""

    def __init__(self, client: SlowClient) -> None:
        self.client = client
        self.writer: asyncio.StreamWriter | None = None
        self.trickling: asyncio.Task[None] | None = None

    async def hold(self, served: ServedApp) -> None:
        """Returns once the server has ended the connection (EOF or a reset)."""
        reader, self.writer = await asyncio.open_connection("127.0.0.1", served.port)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            self.writer.write(self.client.opening)
            if self.client.reads_answer:
                await reader.readuntil(b"\r\n\r\n")
            self.writer.write(self.client.then)
            if self.client.trickles:
                self.trickling = asyncio.create_task(_trickle(self.writer, self.client.trickles))
            while await reader.read(65536):
                pass

    def close(self) -> None:
        if self.trickling is not None:
            self.trickling.cancel()
        if self.writer is not None:
            self.writer.close()


async def _trickle(writer: asyncio.StreamWriter, byte: bytes) -> None:
    with contextlib.suppress(ConnectionError):
        while True:
            await asyncio.sleep(TRICKLE)
            writer.write(byte)
            await writer.drain()


async def served_now(served: ServedApp) -> bool:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    except OSError:
        return False
    try:
        writer.write(request("/healthz"))
        return (await reader.readline()).startswith(b"HTTP/1.1 200")
    except ConnectionError:
        return False
    finally:
        writer.close()


MIXES = {
    "the report's, 8 times": [REFUSED_THEN_A_BYTE] * 8,
    "every kind": [
        STALLED_HEADERS,
        TRICKLED_HEADERS,
        REFUSED_THEN_A_BYTE,
        STALLED_BODY,
        TRICKLED_BODY,
        TRICKLED_BODY,
        STRAY_CRLF,
        STALLED_BODY,
    ],
}


@pytest.mark.parametrize("mix", MIXES.values(), ids=MIXES.keys())
async def test_slow_clients_holding_every_connection_do_not_lock_new_clients_out(
    serve: Serve, mix: list[SlowClient]
) -> None:
    served = serve_short(serve, max_connections=len(mix))
    counted = await count_peak(served)
    holders = [Holder(client) for client in mix]
    holding = {asyncio.create_task(holder.hold(served)): holder.client.name for holder in holders}
    try:

        async def full() -> bool:
            return counted.peak >= len(mix)

        await eventually(full, "the slow clients hold every connection")
        started = time.monotonic()

        async def new_client_served() -> bool:
            return await served_now(served)

        await eventually(new_client_served, "a new client is served", timeout=CUT_OFF)
        waited = time.monotonic() - started
        _, still = await asyncio.wait(holding, timeout=max(0.0, CUT_OFF - waited))
        assert not still, f"still held {CUT_OFF} s on: {sorted(holding[task] for task in still)}"
    finally:
        for task in holding:
            task.cancel()
        for holder in holders:
            holder.close()
