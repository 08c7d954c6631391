"""Connection limits on a served service (libs.http.connection_limits), through libs.http.serve's own config.

Real uvicorn, uvloop and httptools on a loopback port; the clients are raw sockets, so a
test can send what no HTTP library would (a 1 MiB header, half a request line).
"""

from __future__ import annotations

import contextlib

from libs.errors import PROBLEM_TYPE_BASE
from tests.support.raw_http import Serve, closed_by_server, connect, get, read_response, refusals, request
from tests.support.serving import ServedApp
from tests.support.waiting import wait_until


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
