"""LeanTransport against raw TCP peers on loopback: framing, keep-alive, pool bounds, failures."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from libs.http.lean_transport import LeanTransport
from libs.http.transport import Call, ConnectFailed, ConnectionLost, TimedOut

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def peer(handle: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A TCP peer; yields its base URL and a list that grows by one per connection."""
    connections: list[int] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", connections


async def read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return head[0], headers, body


def answer(body: bytes, *, extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\nX-Echo: yes\r\n{extra}\r\n".encode() + body


async def echo_forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each request with its request line and body, keeping the connection."""
    while True:
        line, _, body = await read_request(reader)
        writer.write(answer(line.encode() + b"|" + body))
        await writer.drain()


@pytest.fixture
async def transport() -> AsyncIterator[LeanTransport]:
    lean = LeanTransport(connect_timeout=1.0, timeout=5.0, max_connections=2)
    await lean.start()
    yield lean
    await lean.close()


def call(method: str, url: str, body: bytes | None = None, **kwargs: object) -> Call:
    return Call(method, url, body, {"x-petrel-internal-token": "t"}, **kwargs)  # type: ignore[arg-type]


async def test_calls_share_one_keep_alive_connection(transport: LeanTransport) -> None:
    async with peer(echo_forever) as (base, connections):
        first = await transport.send(call("POST", f"{base}/put", b"abc"))
        second = await transport.send(call("GET", f"{base}/q", params={"offset": 5, "tag": "a b"}))
    assert (first.status, first.body) == (200, b"POST /put HTTP/1.1|abc")
    assert second.body == b"GET /q?offset=5&tag=a+b HTTP/1.1|"
    assert first.headers["x-echo"] == first.headers["X-Echo"] == "yes"  # names are found whatever their case
    assert len(connections) == 1


async def test_a_chunked_answer_is_read_whole(transport: LeanTransport) -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        await writer.drain()
        await reader.read()

    async with peer(chunked) as (base, _):
        assert (await transport.send(call("GET", f"{base}/x"))).body == b"abcde"


async def test_an_answer_ended_by_the_close_is_read_whole(transport: LeanTransport) -> None:
    async def close_delimited(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        await writer.drain()

    async with peer(close_delimited) as (base, connections):
        assert (await transport.send(call("GET", f"{base}/x"))).body == b"all of it"
        assert (await transport.send(call("GET", f"{base}/x"))).body == b"all of it"
    assert len(connections) == 2  # never reused


async def test_calls_beyond_the_limit_wait_for_a_connection(transport: LeanTransport) -> None:
    async with peer(echo_forever) as (base, connections):
        answers = await asyncio.gather(*(transport.send(call("POST", f"{base}/{i}", b"x")) for i in range(20)))
    assert [a.body for a in answers] == [f"POST /{i} HTTP/1.1|x".encode() for i in range(20)]
    assert len(connections) == 2  # max_connections


async def test_a_long_poll_takes_no_connection_other_calls_need(transport: LeanTransport) -> None:
    held = asyncio.Event()
    release = asyncio.Event()

    async def holds_long_polls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            line, _, _ = await read_request(reader)
            if "/poll" in line:
                held.set()
                await release.wait()
            writer.write(answer(line.encode()))
            await writer.drain()

    async with peer(holds_long_polls) as (base, _):
        polls = [asyncio.ensure_future(transport.send(call("GET", f"{base}/poll", waiting=True))) for _ in range(3)]
        await held.wait()
        assert (await transport.send(call("GET", f"{base}/ack"))).status == 200  # while three polls wait
        release.set()
        assert all(a.status == 200 for a in await asyncio.gather(*polls))


async def test_a_refused_connection_is_connect_failed(transport: LeanTransport) -> None:
    async with peer(echo_forever) as (base, _):
        pass  # closed: nothing listens there now
    with pytest.raises(ConnectFailed):
        await transport.send(call("POST", f"{base}/put", b"x"))


async def test_a_post_whose_connection_breaks_is_connection_lost_and_not_resent(transport: LeanTransport) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async with peer(hang_up) as (base, connections):
        with pytest.raises(ConnectionLost):
            await transport.send(call("POST", f"{base}/put", b"x"))
    assert len(connections) == 1


async def test_a_get_on_a_connection_the_peer_had_closed_is_sent_again_on_a_new_one(
    transport: LeanTransport,
) -> None:
    async def one_answer_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line, _, _ = await read_request(reader)
        writer.write(answer(line.encode()))  # keep-alive promised, then the peer closes anyway
        await writer.drain()
        with contextlib.suppress(asyncio.IncompleteReadError):
            await read_request(reader)  # the next request arrives on a connection about to close

    async with peer(one_answer_then_close) as (base, connections):
        await transport.send(call("GET", f"{base}/a"))
        assert (await transport.send(call("GET", f"{base}/b"))).body == b"GET /b HTTP/1.1"
    assert len(connections) == 2


async def test_a_timed_out_call_leaves_no_answer_behind_for_the_next(transport: LeanTransport) -> None:
    late = asyncio.Event()

    async def slow_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = True
        while True:
            line, _, _ = await read_request(reader)
            if first:
                await late.wait()  # answered only once the caller has given up on it
                first = False
            writer.write(answer(line.encode()))
            await writer.drain()

    async with peer(slow_first) as (base, connections):
        with pytest.raises(TimedOut):
            await transport.send(call("GET", f"{base}/slow", timeout=0.1))
        late.set()
        assert (await transport.send(call("GET", f"{base}/next"))).body == b"GET /next HTTP/1.1"
    assert len(connections) == 2  # the timed-out connection was dropped, its late answer never read
