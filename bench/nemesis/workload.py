"""The set workload: writers send unique bodies through the gateway, each with an Idempotency-Key, and keep every
answer.

Writer w sends `<run> w<w> n<n>` (the key the same), one at a time. A send that is not answered
2xx (refused, 5xx, no answer) is sent again, with the same body and key, until it is answered or
the load stops: the Idempotency-Key makes a repeat answer the first copy rather than store another.
Every try is kept (`Try`), and for an answered send where it was stored (`Answered`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import httpx

TOPIC = "nemesis"
QUEUES = 4
PACE_S = 0.02
"""Seconds a writer waits between two sends, and before a repeat."""


@dataclass(frozen=True, slots=True)
class Try:
    sent_at: float
    """time.monotonic() when it was sent"""
    done_at: float
    status: int | None
    """None: no answer (the connection failed or timed out)"""
    problem: str = ""


@dataclass(frozen=True, slots=True)
class Answered:
    message_id: str
    broker: str
    queue_id: int
    queue_offset: int
    at: float
    """time.monotonic() of the 2xx"""


@dataclass(slots=True)
class Send:
    body: str
    tries: list[Try] = field(default_factory=list)
    answered: Answered | None = None

    @property
    def first_sent_at(self) -> float:
        return self.tries[0].sent_at

    @property
    def last_done_at(self) -> float:
        return self.tries[-1].done_at


@dataclass(slots=True)
class Workload:
    run: str
    """unique to the run: bodies and keys of another run never match"""
    writers: int = 4
    sends: list[Send] = field(default_factory=list)

    def answered(self) -> list[Send]:
        return [s for s in self.sends if s.answered is not None]

    def answered_since(self, moment: float) -> int:
        return sum(1 for s in self.sends if s.answered is not None and s.answered.at >= moment)

    async def write(self, gateway: httpx.AsyncClient, stop: asyncio.Event) -> None:
        """Every writer, until `stop` is set (a send under way finishes its current try first)."""
        await asyncio.gather(*(self._writer(gateway, w, stop) for w in range(self.writers)))

    async def _writer(self, gateway: httpx.AsyncClient, writer: int, stop: asyncio.Event) -> None:
        n = 0
        while not stop.is_set():
            send = Send(f"{self.run} w{writer} n{n}")
            self.sends.append(send)
            while not stop.is_set() and send.answered is None:
                await self._try(gateway, send)
                await asyncio.sleep(PACE_S)
            n += 1

    @staticmethod
    async def _try(gateway: httpx.AsyncClient, send: Send) -> None:
        sent_at = time.monotonic()
        try:
            answer = await gateway.post(
                f"/v1/topics/{TOPIC}/messages",
                json={"body": send.body},
                headers={"Idempotency-Key": send.body.replace(" ", "-")},
            )
        except httpx.HTTPError as exc:
            send.tries.append(Try(sent_at, time.monotonic(), None, type(exc).__name__))
            return
        done_at = time.monotonic()
        if not answer.is_success:
            send.tries.append(Try(sent_at, done_at, answer.status_code, _problem(answer)))
            return
        send.tries.append(Try(sent_at, done_at, answer.status_code))
        stored = answer.json()
        send.answered = Answered(
            stored["message_id"], stored["broker"], stored["queue_id"], stored["queue_offset"], done_at
        )


def _problem(answer: httpx.Response) -> str:
    try:
        return str(answer.json()["type"]).rsplit("/", 1)[-1]
    except (ValueError, KeyError, TypeError):
        return answer.text[:80]
