"""Pure ASGI middleware every service shares: request metrics, Host check, internal token, body limit.

Pure ASGI (not BaseHTTPMiddleware) keeps them off the hot path's allocation budget
and lets them answer before a body is read.

On an internal service, the Host check comes first (every path, health ones too:
`/metrics` names topics and groups, and a probe by IP address passes anyway),
then the token (every path but `OPEN_PATHS`, routed or not, `/docs` and
`/openapi.json` included). A WebSocket handshake is refused as a call is.
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from libs.errors import HostNotAllowed, PayloadTooLarge, PetrelError, Unauthorized
from libs.problem import error_response

INTERNAL_TOKEN_HEADER = "x-petrel-internal-token"
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""Answered without the token: probes and Prometheus need no secret, and these tell nothing a caller could use."""
ALLOWED_HOSTS_SETTING = "PETREL_ALLOWED_HOSTS"
CHECKED_SCOPES = frozenset({"http", "websocket"})


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
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            method = scope["method"]
            self.metrics.requests.labels(self.metrics.service, method, template, str(status)).inc()
            self.metrics.latency.labels(self.metrics.service, method, template).observe(time.perf_counter() - started)


class InternalTokenMiddleware:
    """Refuses internal calls that lack the cluster's shared token (when one is set), on any path but `open_paths`."""

    def __init__(self, app: ASGIApp, token: str, open_paths: Iterable[str] = OPEN_PATHS) -> None:
        self.app = app
        self.token = token.encode()
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in CHECKED_SCOPES and scope["path"] not in self.open_paths:
            given = dict(scope["headers"]).get(INTERNAL_TOKEN_HEADER.encode(), b"")
            if not hmac.compare_digest(given, self.token):
                await send_problem(scope, send, Unauthorized(f"missing or wrong {INTERNAL_TOKEN_HEADER} header"))
                return
        await self.app(scope, receive, send)


class HostCheckMiddleware:
    """Answers 400 to a call whose Host header is a name the service does not answer to.

    IP addresses (v4, v6; with or without a port) and `localhost` pass, and the
    names in `allowed_hosts` (`name` or `name:port`: any port). A DNS-rebinding
    page (a name of the attacker's that resolves to this machine once the page
    is loaded) sends its own name.
    A request with no Host at all (HTTP/1.0; no browser sends one) passes.
    """

    KNOWN_MAX = 256
    """Host values already answered, kept to skip parsing them on the hot path (a few per cluster)."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = frozenset(host_name(name).rstrip(".") for name in allowed_hosts) | {"localhost"}
        self._known: set[bytes] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in CHECKED_SCOPES:
            given = dict(scope["headers"]).get(b"host")
            if given is not None and given not in self._known and not self._answered(given):
                refused = HostNotAllowed(
                    f"this service does not answer to the Host {given.decode('latin-1')!r}: call it by IP address "
                    f"or localhost, or list the name in {ALLOWED_HOSTS_SETTING}",
                    host=given.decode("latin-1"),
                    setting=ALLOWED_HOSTS_SETTING,
                )
                await send_problem(scope, send, refused)
                return
        await self.app(scope, receive, send)

    def answers_to(self, host: str) -> bool:
        name = host_name(host)
        return _is_ip_address(name) or name.rstrip(".") in self.allowed

    def _answered(self, given: bytes) -> bool:
        if not self.answers_to(given.decode("latin-1")):
            return False
        if len(self._known) < self.KNOWN_MAX:
            self._known.add(given)
        return True


def host_name(host: str) -> str:
    """A Host header's name or address, lower-cased, without its port or an IPv6 address's brackets."""
    value = host.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 else value
    if _is_ip_address(value):  # an IPv6 address sent without brackets
        return value
    name, colon, port = value.rpartition(":")
    return name if colon and port.isdigit() else value


def _is_ip_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
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
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.max_bytes:
                await send_problem(scope, send, self._too_large(int(declared)))
                return
            await self.app(scope, receive, send)
            return
        # Chunked upload: buffer it up to the limit, then replay it to the app.
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await send_problem(scope, send, self._too_large(size, at_least=True))
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)

    def _too_large(self, size: int, at_least: bool = False) -> PayloadTooLarge:
        qualifier = "at least " if at_least else ""
        return PayloadTooLarge(
            f"the body is {qualifier}{size} bytes; the limit is {self.max_bytes}", limit=self.max_bytes
        )


async def send_problem(scope: Scope, send: Send, exc: PetrelError) -> None:
    """Answer `exc` as problem+json from a pure ASGI middleware, without reading the body."""
    if scope["type"] == "websocket":  # refused before the handshake is accepted: the client sees a 403
        await send({"type": "websocket.close", "code": 1008, "reason": exc.detail[:120]})
        return
    response = error_response(exc, scope.get("path"))

    async def no_body() -> Message:
        return {"type": "http.disconnect"}

    await response(scope, no_body, send)
