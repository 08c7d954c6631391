"""What every service's requests pass: request metrics, the Host check, the cluster token, the body limit.

The Host check and the token are guards (libs.http.guards): run by a GuardMiddleware on
the way to FastAPI's routing, and called directly by the hot path; the metrics and the
body limit are pure ASGI middleware, whose parts the hot path calls too (`RequestMetrics.record`,
`declared_length`, `read_body`). All of it answers before a body is read.

On an internal service, the Host check comes first (every path, health ones too:
`/metrics` names topics and groups, and a probe by IP address passes anyway),
then the token (every path but `OPEN_PATHS`, routed or not, `/docs` and
`/openapi.json` included). A WebSocket handshake is refused as a call is.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from libs.cluster_token import INTERNAL_TOKEN_HEADER
from libs.errors import HostNotAllowed, PayloadTooLarge, Unauthorized
from libs.http.guards import HTTP_AND_WEBSOCKET, Refusal, send_problem
from libs.http.hosts import host_name, is_ip_address

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""Answered without the token: probes and Prometheus need no secret, and these tell nothing a caller could use."""
ALLOWED_HOSTS_SETTING = "PETREL_ALLOWED_HOSTS"


class RequestMetrics:
    """Per-app Prometheus registry with the request counters every service exports."""

    def __init__(self, service: str) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "petrel_http_requests",
            "HTTP requests answered",
            ["service", "method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "petrel_http_request_seconds",
            "Time to answer an HTTP request",
            ["service", "method", "route"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30),
        )
        self.service = service
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def record(self, method: str, template: str, status: int, seconds: float) -> None:
        """Count one answered request (its labelled children are kept: `labels` costs more than the count)."""
        key = (method, template, status)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self.requests.labels(self.service, method, template, str(status)),
                self.latency.labels(self.service, method, template),
            )
        children[0].inc()
        children[1].observe(seconds)


class RequestMetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: RequestMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_recording(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_recording)
        finally:
            template = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.record(scope["method"], template, status, time.perf_counter() - started)


class ClusterTokenCheck:
    """Refuses internal calls that lack the cluster's shared token (when one is set), on any path but `open_paths`."""

    scopes = HTTP_AND_WEBSOCKET

    def __init__(self, token: str, open_paths: Iterable[str] = OPEN_PATHS) -> None:
        self.token = token.encode()
        self.open_paths = frozenset(open_paths)

    async def refusal(self, scope: Scope) -> Refusal | None:
        if scope["path"] in self.open_paths:
            return None
        given = header(scope, INTERNAL_TOKEN_HEADER.encode()) or b""
        if hmac.compare_digest(given, self.token):
            return None
        return Refusal(Unauthorized(f"missing or wrong {INTERNAL_TOKEN_HEADER} header"))


def header(scope: Scope, name: bytes) -> bytes | None:
    """A request header's first value (`name` lowercase), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


class HostCheck:
    """Answers 400 to a call whose Host header is a name the service does not answer to.

    IP addresses (v4, v6; with or without a port) and `localhost` pass, and the
    names in `allowed_hosts` (`name` or `name:port`: any port). A DNS-rebinding
    page (a name of the attacker's that resolves to this machine once the page
    is loaded) sends its own name.
    A request with no Host at all (HTTP/1.0; no browser sends one) passes.
    """

    KNOWN_MAX = 256
    """Host values already answered, kept to skip parsing them on the hot path (a few per cluster)."""

    scopes = HTTP_AND_WEBSOCKET

    def __init__(self, allowed_hosts: Iterable[str] = ()) -> None:
        self.allowed = frozenset(host_name(name).rstrip(".") for name in allowed_hosts) | {"localhost"}
        self._known: set[bytes] = set()

    async def refusal(self, scope: Scope) -> Refusal | None:
        given = header(scope, b"host")
        if given is None or given in self._known or self._answered(given):
            return None
        return Refusal(
            HostNotAllowed(
                f"this service does not answer to the Host {given.decode('latin-1')!r}: call it by IP address "
                f"or localhost, or list the name in {ALLOWED_HOSTS_SETTING}",
                host=given.decode("latin-1"),
                setting=ALLOWED_HOSTS_SETTING,
            )
        )

    def answers_to(self, host: str) -> bool:
        name = host_name(host)
        return is_ip_address(name) or name.rstrip(".") in self.allowed

    def _answered(self, given: bytes) -> bool:
        if not self.answers_to(given.decode("latin-1")):
            return False
        if len(self._known) < self.KNOWN_MAX:
            self._known.add(given)
        return True


class BodyLimitMiddleware:
    """Answers 413 for a body over `max_bytes`, before the endpoint reads any of it.

    A declared body is refused from its Content-Length; the server frames the body by
    that length (uvicorn's parser hands the app no byte past it, and answers the bytes
    that follow as a malformed next request), so it is never longer than declared.
    A chunked body is read up to the limit, then handed on whole.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = declared_length(scope)
        if declared is not None:
            if declared > self.max_bytes:
                await send_problem(scope, send, body_too_large(declared, self.max_bytes))
                return
            await self.app(scope, receive, send)
            return
        # Chunked upload: buffer it up to the limit, then replay it to the app.
        try:
            body = await read_body(receive, self.max_bytes)
        except PayloadTooLarge as exc:
            await send_problem(scope, send, exc)
            return
        except ClientDisconnect:
            return  # the client left before the body was whole: nobody to answer
        await self.app(scope, replaying(body, receive), send)


def declared_length(scope: Scope) -> int | None:
    """The Content-Length the request declares, when it is a number."""
    declared = header(scope, b"content-length")
    return int(declared) if declared is not None and declared.isascii() and declared.isdigit() else None


def body_too_large(size: int, max_bytes: int, at_least: bool = False) -> PayloadTooLarge:
    qualifier = "at least " if at_least else ""
    return PayloadTooLarge(f"the body is {qualifier}{size} bytes; the limit is {max_bytes}", limit=max_bytes)


async def read_body(receive: Receive, max_bytes: int | None = None) -> bytes:
    """The whole body, counted as it comes: PayloadTooLarge past `max_bytes`, ClientDisconnect if the client left."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect
        chunk = message.get("body", b"")
        size += len(chunk)
        if max_bytes is not None and size > max_bytes:
            raise body_too_large(size, max_bytes, at_least=True)
        chunks.append(chunk)
        more = message.get("more_body", False)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app `body` whole, then what the connection says next (a disconnect)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
