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
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import httpx

from libs.egress import Destination, EgressGuard, checked_request
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
    def __init__(
        self,
        url: str,
        guard: EgressGuard,
        *,
        max_connections: int,
        max_answer_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.guard = guard
        self.max_answer_bytes = max_answer_bytes
        self.clock = clock
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self.http = httpx.AsyncClient(limits=limits, follow_redirects=False, trust_env=False)
        self._checked: tuple[float, Destination] | None = None

    async def close(self) -> None:
        await self.http.aclose()

    async def post(self, body: bytes, headers: dict[str, str], timeout: float) -> Verdict:
        started = self.clock()
        try:
            destination = await self._destination()
        except InvalidRequest as exc:
            return Verdict(Outcome.THROTTLED, None, 0, f"refused by the egress guard: {exc.detail}")
        request = checked_request(self.http, destination, body, headers, timeout)
        try:
            response = await self.http.send(request, stream=True)
            try:
                text = await self._read(response)
            finally:
                await response.aclose()
        except httpx.TimeoutException:
            return Verdict(Outcome.THROTTLED, None, self._ms(started), f"no answer within {timeout:g} s")
        except httpx.TransportError as exc:
            return Verdict(Outcome.THROTTLED, None, self._ms(started), f"no connection: {_describe(exc)}")
        return judge(response, text, self._ms(started))

    async def _destination(self) -> Destination:
        now = self.clock()
        if self._checked is not None and now - self._checked[0] < RECHECK_SECONDS:
            return self._checked[1]
        destination = await asyncio.to_thread(self.guard.check, self.url)
        self._checked = (now, destination)
        return destination

    async def _read(self, response: httpx.Response) -> bytes:
        """The answer's first bytes (for an error's text); the rest is not read."""
        if response.is_success:
            return b""
        content = bytearray()
        async for chunk in response.aiter_raw():
            content += chunk
            if len(content) >= min(self.max_answer_bytes, MAX_ERROR_TEXT):
                break
        return bytes(content)

    def _ms(self, started: float) -> int:
        return int((self.clock() - started) * 1000)


def judge(response: httpx.Response, text: bytes, latency_ms: int) -> Verdict:
    """What the endpoint's answer means for the message."""
    status = response.status_code
    if response.is_success:
        deferred = status == 202 and response.headers.get(DEFERRED_HEADER, "").strip().lower() == "deferred"
        return Verdict(Outcome.DEFERRED if deferred else Outcome.ACKED, status, latency_ms)
    error = f"HTTP {status}" + (f": {_snippet(text)}" if text else "")
    if status == 410:
        return Verdict(Outcome.GONE, status, latency_ms, error)
    if status in THROTTLING_STATUSES:
        return Verdict(Outcome.THROTTLED, status, latency_ms, error, response.headers.get("retry-after"))
    if response.is_redirect:
        error = f"HTTP {status}: redirects are not followed (to {response.headers.get('location', '?')})"
    return Verdict(Outcome.FAILED, status, latency_ms, error)


def _snippet(text: bytes) -> str:
    return text[:MAX_ERROR_TEXT].decode(errors="replace").replace("\n", " ").strip()


def _describe(exc: httpx.TransportError) -> str:
    return str(exc) or type(exc).__name__
