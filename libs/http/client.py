"""The internal HTTP client every service uses to call another.

Built on aiohttp: `make bench` (scenario `internal-client`) measured it at about
20x httpx for 1 KiB binary POSTs over 32 keep-alive connections on loopback.

- One pooled keep-alive session per process, opened in a lifespan (`start`),
  and a second one for long polls (`waiting=True`): a call the peer may hold
  for seconds never takes a connection that a send, an ack or an admin call
  needs. The long-poll pool has no per-host limit of its own; whoever opens
  long polls bounds how many wait at once (the gateway's LongPollGate).
- Connect and total timeouts; a per-call timeout for long polls.
- The cluster's internal token header on every call when one is configured.
- Retries (with short backoff) only for idempotent calls, and only when the
  connection could not be made or the peer said 503; a POST is retried only
  when the caller declares it idempotent. (aiohttp itself already re-sends an
  idempotent request once when a pooled keep-alive connection turns out to be
  closed; a timeout is never retried, so a long poll never doubles.)
- A peer's problem+json comes back as the same `PetrelError` subclass;
  transport failures become `ServiceUnavailable`, whose `request_sent` extension
  says whether the peer may have acted on the request (false only when the
  connection could not be made).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from libs import jsonutil
from libs.errors import PetrelError, ServiceUnavailable, UpstreamError
from libs.http.middleware import INTERNAL_TOKEN_HEADER

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


@dataclass(frozen=True, slots=True)
class BinaryResponse:
    status: int
    body: bytes
    headers: Mapping[str, str]


class InternalClient:
    def __init__(self, options: ClientOptions = ClientOptions()) -> None:
        self.options = options
        self._session: aiohttp.ClientSession | None = None
        self._waiting: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = self._open(self.options.max_connections)
        self._waiting = self._open(0)  # 0: no limit; the long polls' callers bound them

    def _open(self, limit: int) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=limit, keepalive_timeout=30)
        headers = {INTERNAL_TOKEN_HEADER: self.options.token} if self.options.token else {}
        return aiohttp.ClientSession(
            connector=connector,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.options.timeout, connect=self.options.connect_timeout),
            json_serialize=lambda v: jsonutil.dumps(v).decode(),
        )

    async def close(self) -> None:
        for session in (self._session, self._waiting):
            if session is not None:
                await session.close()
        self._session = self._waiting = None

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
        session = self._waiting if waiting else self._session
        if session is None:
            raise RuntimeError("InternalClient.start() was not called")
        retryable = method in IDEMPOTENT_METHODS if idempotent is None else idempotent
        attempts = 1 + (self.options.retries if retryable else 0)
        headers = {"content-type": content_type} if data is not None else None
        per_call = aiohttp.ClientTimeout(total=timeout, connect=self.options.connect_timeout) if timeout else None
        last: PetrelError | None = None
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(self.options.retry_backoff * 2 ** (attempt - 1))
            try:
                async with session.request(
                    method, url, data=data, params=params, headers=headers, timeout=per_call or aiohttp.helpers.sentinel
                ) as response:
                    body = await response.read()
                    if response.status < 400:
                        return BinaryResponse(response.status, body, response.headers)
                    last = error_for_response(
                        method, url, response.status, response.headers.get("content-type", ""), body
                    )
                    if response.status != 503:
                        raise last
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                # request_sent: the peer may have got (and acted on) the request; only a failed connect says no
                sent = not _safe_to_retry(exc)
                last = ServiceUnavailable(f"{method} {url} failed: {_describe(exc)}", request_sent=sent)
                if not retryable or not _safe_to_retry(exc):
                    raise last from exc
        assert last is not None
        raise last


def _safe_to_retry(exc: BaseException) -> bool:
    # A failed connect never reached the peer. A connection dropped mid-call may
    # have been processed: aiohttp has already re-sent it once if that was safe.
    return isinstance(exc, aiohttp.ClientConnectorError)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


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
