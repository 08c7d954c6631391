"""PutCoalescer: concurrent sends to one broker share binary puts (CallCoalescer: the same for other calls).

At most `max_in_flight` puts go to a broker at once. Records that arrive while
all are in flight wait, and go out together in the next put as soon as one
returns; a put starts at the end of the loop turn its first send came in, so the
sends of one turn share it (no timer: an idle gateway sends within the turn). A busy
gateway turns many small HTTP hops into few larger ones, as group commit does for disk
syncs. Each caller gets back exactly its own records' results, in order.

Back-pressure: the records waiting for a put are bounded (`max_queued_bytes`).
A send that would pass the bound is answered at once with `PutQueueFull` for
each of its records (503, nothing sent: the sender may try another broker), so a slow broker makes the
gateway answer 503s rather than grow its memory without end.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from libs.broker_api.schemas import PutAnswer, PutEntry
from libs.errors import FlushTimeout, PetrelError, PutQueueFull

PutCall = Callable[[bytes], Awaitable[PutAnswer]]
"""Sends records (binary codec, end to end) to the broker; answers its PutAnswer."""

Outcome = list[PutEntry | PetrelError]
"""Per record, in order: where it was stored, or why not (FlushTimeout: stored, its entry in `stored_entry`)."""

MAX_PUTS_IN_FLIGHT = 2
"""Puts to one broker at once. Fewer make larger puts: at 32 concurrent single sends, 4 in flight went out
nearly one record each (2,199 msg/s through the gateway), 2 or 1 carried several (3,075 and 3,093 msg/s; the
broker's CPU a message 143 -> 87 us). Two keep one put filling while another waits for its disk sync."""
MAX_BATCH_BYTES = 4 * 1024 * 1024
MAX_QUEUED_BYTES = 64 * 1024 * 1024
"""Records waiting for a put to one broker, at most (one send larger than it still goes when none wait)."""
Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(slots=True)
class _Waiting:
    records: bytes
    count: int
    future: asyncio.Future[Outcome] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class PutCoalescer:
    def __init__(
        self,
        put: PutCall,
        max_in_flight: int = MAX_PUTS_IN_FLIGHT,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
        broker: str = "",
    ) -> None:
        self.put = put
        self.max_in_flight = max_in_flight
        self.max_queued_bytes = max_queued_bytes
        self.broker = broker
        self.in_flight = 0
        self.queued_bytes = 0
        self._queue: deque[_Waiting] = deque()
        self._starting = False
        self.puts = 0

    async def submit(self, records: bytes, count: int) -> Outcome:
        if self._queue and self.queued_bytes + len(records) > self.max_queued_bytes:
            full = PutQueueFull(
                f"the gateway holds {self.queued_bytes} bytes of records waiting for broker {self.broker or '?'}, "
                "its bound: nothing of this send was stored, send again",
                broker=self.broker,
            )
            return [full] * count
        waiting = _Waiting(records, count)
        self._queue.append(waiting)
        self.queued_bytes += len(records)
        if self.in_flight < self.max_in_flight and not self._starting:
            # At the end of this loop turn: the sends that arrive in the same turn go in the same put. Over a
            # network the puts' round trips make them wait anyway; a broker in this process (colocated) answers
            # within the turn, and every send went out alone.
            self._starting = True
            asyncio.get_running_loop().call_soon(self._start_soon)
        return await waiting.future

    def _start_soon(self) -> None:
        self._starting = False
        if self.in_flight < self.max_in_flight:
            self._start()

    def _start(self) -> None:
        batch: list[_Waiting] = []
        size = 0
        while self._queue and (not batch or size + len(self._queue[0].records) <= MAX_BATCH_BYTES):
            batch.append(self._queue.popleft())
            size += len(batch[-1].records)
        self.queued_bytes -= size
        if batch:
            self.in_flight += 1
            task = asyncio.get_running_loop().create_task(self._send(batch))
            task.add_done_callback(lambda _: None)

    async def _send(self, batch: list[_Waiting]) -> None:
        try:
            self.puts += 1
            answer = await self.put(b"".join(w.records for w in batch))
            outcome: Outcome | PetrelError = per_record(answer, sum(w.count for w in batch))
        except PetrelError as exc:
            outcome = exc
        except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller, never lost
            outcome = PetrelError(f"the put failed unexpectedly: {exc!r}")
        finally:
            self.in_flight -= 1
            if self._queue:
                self._start()
        if isinstance(outcome, PetrelError):
            outcome = refused_per_record(outcome, sum(w.count for w in batch))
        position = 0
        for waiting in batch:
            mine: Outcome
            if isinstance(outcome, PetrelError):
                mine = [outcome] * waiting.count
            else:
                mine = outcome[position : position + waiting.count]
            position += waiting.count
            if not waiting.future.done():  # a caller that went away (cancelled) needs no answer
                waiting.future.set_result(mine)


def per_record(answer: PutAnswer, count: int) -> Outcome:
    """Per record of a put of `count`: where it was stored, or why not (the records after a failure were not tried)."""
    results: Outcome = list(answer.stored)
    if answer.not_durable is not None:
        results = [not_durable(answer.not_durable, entry) for entry in answer.stored]
    if len(results) < count:
        failure = answer.failure
        cls = PetrelError.from_problem_type(failure.type) if failure else None
        error = (cls or PetrelError).rebuild(failure.detail if failure else "not stored", {})
        results.extend([error] * (count - len(results)))
    return results


def refused_per_record(refusal: PetrelError, count: int) -> Outcome | PetrelError:
    """A put refused after its records were appended (`maybe_stored`, with `stored`: libs.store.results): per
    record, the refusal carrying where that record is (`stored_entry`); any other refusal as it is."""
    stored = refusal.extensions.get("stored")
    if not refusal.extensions.get("maybe_stored") or not isinstance(stored, list) or len(stored) != count:
        return refusal
    kept = {k: v for k, v in refusal.extensions.items() if k != "stored"}
    return [type(refusal).rebuild(refusal.detail, kept | {"stored_entry": PutEntry.model_validate(e)}) for e in stored]


def not_durable(detail: str, entry: PutEntry) -> FlushTimeout:
    """A stored record the disk did not confirm in time: the error, carrying where it is stored."""
    return FlushTimeout(detail, stored_entry=entry)


def stored_entry(error: PetrelError) -> PutEntry | None:
    """Where a record that failed with `error` is (a flush timeout), or may be (a refusal after the append)."""
    entry = error.extensions.get("stored_entry")
    return entry if isinstance(entry, PutEntry) else None


class CallCoalescer(Generic[Item, Result]):
    """As PutCoalescer, for calls that take a list of items and answer one result (or error) per item, in order."""

    def __init__(
        self,
        call: Callable[[list[Item]], Awaitable[list[Result | PetrelError]]],
        max_in_flight: int = 4,
        max_batch: int = 1000,
    ) -> None:
        self.call = call
        self.max_in_flight = max_in_flight
        self.max_batch = max_batch
        self.in_flight = 0
        self.calls = 0
        self._queue: list[tuple[Item, asyncio.Future[Result | PetrelError]]] = []

    async def submit(self, item: Item) -> Result | PetrelError:
        future: asyncio.Future[Result | PetrelError] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self.in_flight < self.max_in_flight:
            self._start()
        return await future

    def _start(self) -> None:
        batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
        if batch:
            self.in_flight += 1
            task = asyncio.get_running_loop().create_task(self._send(batch))
            task.add_done_callback(lambda _: None)

    async def _send(self, batch: list[tuple[Item, asyncio.Future[Result | PetrelError]]]) -> None:
        try:
            self.calls += 1
            outcome: list[Result | PetrelError] | PetrelError = await self.call([item for item, _ in batch])
        except PetrelError as exc:
            outcome = exc
        except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller, never lost
            outcome = PetrelError(f"the call failed unexpectedly: {exc!r}")
        finally:
            self.in_flight -= 1
            if self._queue:
                self._start()
        for i, (_, future) in enumerate(batch):
            if not future.done():  # a caller that went away (cancelled) needs no answer
                future.set_result(outcome if isinstance(outcome, PetrelError) else outcome[i])
