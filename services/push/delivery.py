"""Endpoint: one subscription's POSTs to its URL, and what each answer means for the message.

Each POST goes through the egress guard (libs.egress): the URL's host is
resolved and checked, and the connection goes to the very address checked. A
checked address is reused for `RECHECK_SECONDS` (a delivery per millisecond
costs no lookup each); a rebinding host gains nothing from it, as the address
used is the one that passed. Redirects are not followed; an answer is read up
to `max_answer_bytes` and the rest dropped.

What an answer means (`Verdict`):
- 2xx: acked; 202 with `Petrel-Ack: deferred`: the receiver settles it later;
- 410 Gone: the endpoint is gone: the subscription is disabled;
- 429, 502, 503, 504, no answer in time, no connection, an address the guard
  refuses: the endpoint's trouble, not the message's (throttled, not counted),
  with the Retry-After it gave;
- anything else (4xx, 500, 501, a redirect): a failed attempt of the message.

A non-2xx answer's first `MAX_ERROR_TEXT` characters go into the attempt's
error, which the attempts listing shows: the guard lets only public hosts (and
the networks the operator allows) be called, so that text is the receiver's
own answer, which whoever runs the receiver needs to see why deliveries fail.
A refusal by the guard says the host is not public, never what it resolved to.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from ssl import SSLContext
from typing import Final

import aiohttp

from libs.egress import Destination, EgressGuard
from libs.errors import InvalidRequest
from services.push.attempts import Outcome

RECHECK_SECONDS: Final = 10.0
DEFERRED_HEADER: Final = "petrel-ack"
THROTTLING_STATUSES: Final = frozenset({429, 502, 503, 504})
MAX_ERROR_TEXT: Final = 200


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    status: int | None
    latency_ms: int
    error: str | None = None
    retry_after: str | None = None
    """the Retry-After header as given (a throttled answer's)"""


class Endpoint:
    """POSTs over aiohttp's pooled keep-alive connections (httpx stalls on small POSTs: bench/README.md), one
    pool per subscription, at most `max_connections` (its `max_in_flight`)."""

    def __init__(
        self,
        url: str,
        guard: EgressGuard,
        *,
        max_connections: int,
        max_answer_bytes: int,
        clock: Callable[[], float] = time.monotonic,
        ssl: SSLContext | None = None,
    ) -> None:
        """`ssl`: the context https endpoints are verified with (default: the system's CAs)."""
        self.url = url
        self.ssl = ssl
        self.guard = guard
        self.max_answer_bytes = max_answer_bytes
        self.clock = clock
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._checked: tuple[float, Destination] | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.max_connections, keepalive_timeout=30)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False, trust_env=False)
        return self._session

    async def post(self, body: bytes, headers: dict[str, str], timeout: float) -> Verdict:
        started = self.clock()
        try:
            destination = await self._destination()
        except InvalidRequest as exc:
            return Verdict(Outcome.THROTTLED, None, 0, f"refused by the egress guard: {exc.detail}")
        https = destination.url.startswith("https:")
        try:
            async with self._open().post(
                destination.address_url,
                data=body,
                headers=headers | {"host": destination.host_header},
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout),
                server_hostname=destination.host if https else None,
                ssl=self.ssl if self.ssl is not None else True,
            ) as response:
                text = await self._read(response)
        except TimeoutError:
            return Verdict(Outcome.THROTTLED, None, self._ms(started), f"no answer within {timeout:g} s")
        except aiohttp.ClientError as exc:
            return Verdict(Outcome.THROTTLED, None, self._ms(started), f"no connection: {_describe(exc)}")
        return judge(response.status, response.headers, text, self._ms(started))

    async def _destination(self) -> Destination:
        now = self.clock()
        if self._checked is not None and now - self._checked[0] < RECHECK_SECONDS:
            return self._checked[1]
        destination = await asyncio.to_thread(self.guard.check, self.url)
        self._checked = (now, destination)
        return destination

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        """The answer's first `max_answer_bytes` (an error's text is cut shorter); a longer answer is not read to
        its end (its connection is then closed rather than pooled)."""
        return await response.content.read(self.max_answer_bytes)

    def _ms(self, started: float) -> int:
        return int((self.clock() - started) * 1000)


def judge(status: int, headers: Mapping[str, str], text: bytes, latency_ms: int) -> Verdict:
    """What the endpoint's answer means for the message."""
    if 200 <= status < 300:
        deferred = status == 202 and headers.get(DEFERRED_HEADER, "").strip().lower() == "deferred"
        return Verdict(Outcome.DEFERRED if deferred else Outcome.ACKED, status, latency_ms)
    error = f"HTTP {status}" + (f": {_snippet(text)}" if text else "")
    if status == 410:
        return Verdict(Outcome.GONE, status, latency_ms, error)
    if status in THROTTLING_STATUSES:
        return Verdict(Outcome.THROTTLED, status, latency_ms, error, headers.get("retry-after"))
    if 300 <= status < 400:
        error = f"HTTP {status}: redirects are not followed (to {headers.get('location', '?')})"
    return Verdict(Outcome.FAILED, status, latency_ms, error)


def _snippet(text: bytes) -> str:
    return text[:MAX_ERROR_TEXT].decode(errors="replace").replace("\n", " ").strip()


def _describe(exc: aiohttp.ClientError) -> str:
    return str(exc) or type(exc).__name__
