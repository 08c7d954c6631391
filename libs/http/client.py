"""The internal HTTP client every service uses to call another.

Its transport is swappable (`libs.http.transport`): `LeanTransport` in production
(libs.http.lean_transport: HTTP/1.1 on asyncio protocols, httptools parsing; it replaced
aiohttp's client, which cost about three times its CPU per call), the ASGI apps of this
process in tests (`libs.http.asgi`).
Whatever the transport:

- One pooled set of keep-alive connections per peer, opened in a lifespan (`start`),
  and a second one for long polls (`waiting=True`).
- Connect and total timeouts; a per-call timeout for long polls.
- The cluster's internal token header on every call when one is configured.
- Retries (with short backoff) only for idempotent calls, and only when the
  connection could not be made or the peer said 503; a POST is retried only
  when the caller declares it idempotent. (A timeout is never retried, so a
  long poll never doubles.)
- No proxy: whatever HTTP_PROXY, HTTPS_PROXY or ALL_PROXY say, a call goes straight
  to its peer (LeanTransport reads no environment). The few internal calls made with
  httpx instead (a slave's replication stream, epoch sync, the controller link, the etcd client) use
  `internal_http`, which reads none either: through a proxy, the token would go too.
- A peer's problem+json comes back as the same `PetrelError` subclass;
  transport failures become `ServiceUnavailable`, whose `request_sent` extension
  says whether the peer may have acted on the request (false only when the
  connection could not be made).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from libs import jsonutil
from libs.cluster_token import INTERNAL_TOKEN_HEADER
from libs.errors import PetrelError, ServiceUnavailable, UpstreamError
from libs.http.lean_transport import LeanTransport
from libs.http.transport import BinaryResponse, Call, ConnectFailed, Transport, TransportError

__all__ = [
    "BINARY_TYPE",
    "JSON_TYPE",
    "BinaryResponse",
    "ClientOptions",
    "InternalClient",
    "error_for_response",
    "internal_http",
    "tcp_transport",
    "token_header",
]

log = logging.getLogger(__name__)

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
JSON_TYPE = "application/json"
BINARY_TYPE = "application/octet-stream"


@dataclass(frozen=True, slots=True)
class ClientOptions:
    connect_timeout: float = 1.0
    timeout: float = 5.0
    max_connections: int = 256
    """Of the pool for ordinary calls; long polls have their own pool (see `waiting`)."""
    retries: int = 2
    retry_backoff: float = 0.05
    token: str | None = None


class InternalClient:
    def __init__(self, options: ClientOptions = ClientOptions(), transport: Transport | None = None) -> None:
        """`transport`: how calls travel; TCP (LeanTransport) unless given (tests give `AsgiTransport`)."""
        self.options = options
        self.transport: Transport = transport or tcp_transport(options)
        self._headers = token_header(options.token)

    async def start(self) -> None:
        await self.transport.start()

    async def close(self) -> None:
        await self.transport.close()

    async def __aenter__(self) -> InternalClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def json(
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        params: Mapping[str, str | int] | None = None,
        idempotent: bool | None = None,
        timeout: float | None = None,
        waiting: bool = False,
    ) -> Any:
        """Call with an optional JSON body; answers the decoded JSON (None for 204).

        `waiting`: the peer may hold the call (a long poll); it goes through the long-poll pool.
        """
        data = None if body is None else jsonutil.dumps(body)
        response = await self._call(
            method, url, data, JSON_TYPE, params=params, idempotent=idempotent, timeout=timeout, waiting=waiting
        )
        return jsonutil.loads(response.body) if response.body else None

    async def binary(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        params: Mapping[str, str | int] | None = None,
        idempotent: bool | None = None,
        timeout: float | None = None,
        content_type: str = BINARY_TYPE,
        waiting: bool = False,
    ) -> BinaryResponse:
        """Call with a binary body (the record codec, unless content_type says otherwise); answers the raw response."""
        return await self._call(
            method, url, body, content_type, params=params, idempotent=idempotent, timeout=timeout, waiting=waiting
        )

    async def _call(
        self,
        method: str,
        url: str,
        data: bytes | None,
        content_type: str,
        *,
        params: Mapping[str, str | int] | None,
        idempotent: bool | None,
        timeout: float | None,
        waiting: bool = False,
    ) -> BinaryResponse:
        retryable = method in IDEMPOTENT_METHODS if idempotent is None else idempotent
        attempts = 1 + (self.options.retries if retryable else 0)
        headers = self._headers | {"content-type": content_type} if data is not None else self._headers
        call = Call(method, url, data, headers, params, timeout or self.options.timeout, waiting)
        last: PetrelError | None = None
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(self.options.retry_backoff * 2 ** (attempt - 1))
            try:
                response = await self.transport.send(call)
            except TransportError as exc:
                # request_sent: the peer may have got (and acted on) the request; only a failed connect says no
                last = ServiceUnavailable(f"{method} {url} failed: {exc}", request_sent=exc.request_sent)
                if not retryable or not isinstance(exc, ConnectFailed):
                    raise last from exc
                continue
            if response.status < 400:
                return response
            last = error_for_response(
                method, url, response.status, response.headers.get("content-type", ""), response.body
            )
            if response.status != 503:
                raise last
        assert last is not None
        raise last


def tcp_transport(options: ClientOptions) -> Transport:
    """The production transport (LeanTransport) with these options' timeouts and pool size."""
    return LeanTransport(
        connect_timeout=options.connect_timeout, timeout=options.timeout, max_connections=options.max_connections
    )


def token_header(token: str | None) -> dict[str, str]:
    """The header every internal call carries: the cluster token, when the cluster has one."""
    return {INTERNAL_TOKEN_HEADER: token} if token else {}


def internal_http(
    peer: str,
    token: str | None,
    timeout: float | httpx.Timeout,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    verify: ssl.SSLContext | bool = True,
) -> httpx.AsyncClient:
    """An httpx client calling the internal service at `peer` (host:port, or a base URL such as an etcd member's
    https://host:port), for what InternalClient does not do (a stream read as it comes, TLS): the token on every
    call when there is one; no proxy, netrc or certificate file from the environment (trust_env=False), so
    `verify` says which CAs an https peer is checked against. `transport`: tests give an in-process one."""
    base_url = peer if "://" in peer else f"http://{peer}"
    return httpx.AsyncClient(
        base_url=base_url,
        headers=token_header(token),
        timeout=timeout,
        transport=transport,
        trust_env=False,
        verify=verify,
    )


def error_for_response(method: str, url: str, status: int, content_type: str, body: bytes) -> PetrelError:
    """The PetrelError a failed answer stands for: the peer's own problem type when it sent one, else UpstreamError."""
    if content_type.startswith(("application/problem+json", JSON_TYPE)):
        try:
            problem = jsonutil.loads(body)
        except ValueError:
            problem = None
        if isinstance(problem, dict):
            cls = PetrelError.from_problem_type(str(problem.get("type", "")))
            detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
            extensions = {
                k: v for k, v in problem.items() if k not in {"type", "title", "status", "detail", "instance"}
            }
            if cls is not None:
                return cls.rebuild(detail, extensions)
            if "detail" in problem or "title" in problem:
                return UpstreamError(f"{method} {url} answered {status}: {detail}", upstream_status=status)
    text = body[:200].decode(errors="replace")
    return UpstreamError(f"{method} {url} answered {status}: {text}", upstream_status=status)
