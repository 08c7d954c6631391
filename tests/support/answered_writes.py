"""Paced writers that keep every answer they get, with when the write was sent and answered.

A split-brain test judges a cluster by its answers: which writes were acknowledged (2xx),
by whom, when, and at which queue and offset. Writers go through the gateway (`send`) or
straight to one broker's internal put (`put`), one message per call, on topic `crash` (read
back with tests.support.crash_sends.read_topic), until told to stop. A write that got no
answer (refused connection, timeout) is kept too, with status None.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from libs.codec import encode_record
from libs.message import MessageRecord, Prop

TOPIC = "crash"
PACE = 0.02
"""Seconds a writer waits between two writes: a steady load, not a flood of refusals once a broker is fenced."""


@dataclass(frozen=True, slots=True)
class Answer:
    writer: str
    sent_at: float
    """time.monotonic() when the write was sent (one clock for every process of this machine)."""
    answered_at: float
    status: int | None
    """None: no answer (the connection failed or timed out)."""
    message_id: str
    body: str
    queue_id: int | None = None
    queue_offset: int | None = None
    problem: str | None = None
    """A refusal's problem type, its last part: not-master, replication-timeout, ..."""

    @property
    def acked(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


Write = Callable[[int], Coroutine[Any, Any, Answer]]
T = TypeVar("T")


async def write_until(stop: asyncio.Event, write: Write, answers: list[Answer]) -> None:
    """`write(0)`, `write(1)`, ... one at a time, PACE apart, until `stop` is set; every answer into `answers`."""
    n = 0
    while not stop.is_set():
        answers.append(await write(n))
        n += 1
        await asyncio.sleep(PACE)


async def sample_until(stop: asyncio.Event, look: Callable[[], Awaitable[T]], samples: list[tuple[float, T]]) -> None:
    """`look()` every PACE until `stop` is set, each result kept with when it came: a state over time (a broker's
    status while it is cut off, say), where `tests.support.waiting.eventually` waits for one."""
    while not stop.is_set():
        seen = await look()
        samples.append((time.monotonic(), seen))
        await asyncio.sleep(PACE)


def send(gateway: httpx.AsyncClient, writer: str) -> Write:
    """Sends through the gateway: message `n`'s body is `<writer> <n>`."""

    async def write(n: int) -> Answer:
        body = f"{writer} {n}"
        sent_at = time.monotonic()
        try:
            answer = await gateway.post(f"/v1/topics/{TOPIC}/messages", json={"body": body})
        except httpx.HTTPError as exc:
            return Answer(writer, sent_at, time.monotonic(), None, "", body, problem=type(exc).__name__)
        answered_at = time.monotonic()
        if answer.status_code != 201:
            return Answer(writer, sent_at, answered_at, answer.status_code, "", body, problem=_problem(answer))
        sent = answer.json()
        return Answer(
            writer, sent_at, answered_at, 201, sent["message_id"], body, sent["queue_id"], sent["queue_offset"]
        )

    return write


def put(broker: httpx.AsyncClient, writer: str, queues: int) -> Write:
    """Puts to one broker (internal put): message `n` is `<writer>-<n>`, to queue `n % queues`."""

    async def write(n: int) -> Answer:
        return await put_one(broker, writer, f"{writer}-{n}", n % queues)

    return write


async def put_one(broker: httpx.AsyncClient, writer: str, message_id: str, queue_id: int) -> Answer:
    body = f"{message_id} put straight to the broker"
    record = encode_record(
        MessageRecord(topic=TOPIC, body=body.encode(), queue_id=queue_id, properties={Prop.UNIQ_KEY: message_id})
    )
    sent_at = time.monotonic()
    try:
        answer = await broker.post(
            "/internal/messages", headers={"content-type": "application/octet-stream"}, content=record
        )
    except httpx.HTTPError as exc:
        return Answer(writer, sent_at, time.monotonic(), None, message_id, body, problem=type(exc).__name__)
    answered_at = time.monotonic()
    if answer.status_code != 200:
        return Answer(writer, sent_at, answered_at, answer.status_code, message_id, body, problem=_problem(answer))
    (stored,) = answer.json()["stored"]
    return Answer(writer, sent_at, answered_at, 200, message_id, body, stored["queue_id"], stored["queue_offset"])


def _problem(answer: httpx.Response) -> str:
    try:
        return str(answer.json()["type"]).rsplit("/", 1)[-1]
    except (ValueError, KeyError, TypeError):
        return answer.text[:80]
