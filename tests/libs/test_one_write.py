"""HeadWithBody: a response's head goes out with its body's first part, in one write."""

from typing import Any

from libs.http.one_write import HeadWithBody


class Recording:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def writelines(self, parts: Any) -> None:
        self.writes.append(b"".join(parts))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"extra {name}"


def wrapped() -> tuple[HeadWithBody, Recording]:
    inner = Recording()
    return HeadWithBody(inner), inner  # type: ignore[arg-type]


def test_head_and_body_are_one_write_then_writes_pass_through() -> None:
    transport, inner = wrapped()
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert inner.writes == []
    transport.write(b"first")
    transport.write(b"second")
    assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\nfirst", b"second"]


def test_a_large_body_follows_the_head_in_the_same_call() -> None:
    transport, inner = wrapped()
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    transport.write(b"x" * 100_000)
    assert inner.writes == [b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 100_000]


def test_a_close_before_the_body_still_sends_the_head() -> None:
    transport, inner = wrapped()
    transport.write(b"HTTP/1.1 500 Internal Server Error\r\n\r\n")
    transport.close()
    assert inner.writes == [b"HTTP/1.1 500 Internal Server Error\r\n\r\n"]
    assert inner.closed


def test_100_continue_is_not_held() -> None:
    transport, inner = wrapped()
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert inner.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    transport.write(b"HTTP/1.1 201 Created\r\n\r\n")
    transport.write(b"{}")
    assert inner.writes[1:] == [b"HTTP/1.1 201 Created\r\n\r\n{}"]


def test_everything_else_is_the_transport_s() -> None:
    transport, _ = wrapped()
    assert transport.get_extra_info("peername") == "extra peername"
