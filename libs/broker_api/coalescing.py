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

A master replaced under a put: a master that is SIGSTOPped or cut off holds its connections and answers
nothing, while the controller promotes its slave (its lease's 2 s TTL, then one election). Given a
`replaced` check, a put unanswered for `stall_check_s` asks every `stall_recheck_s` whether another
broker is its broker name's master now; once one is, its callers stop waiting (their records may be
stored: `master_replaced` with `maybe_stored`) and the records still queued here are answered at once
(`master_replaced`, nothing sent). The put itself runs on to its own timeout, its answer unread. No
answer comes any sooner than the slave's promotion: the put may not be given up while the master may
still answer it, and a master answers nothing after its lease ends.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from libs.broker_api.schemas import PutAnswer, PutEntry
from libs.errors import BrokerUnavailable, FlushTimeout, PetrelError, PutQueueFull

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
STALL_CHECK_S = 2.0
"""A put unanswered this long starts asking whether its master was replaced (a slave is master about 2.2 s after
its master stopped: the lease's 2 s TTL, then one election; docs/replication.md), then every STALL_RECHECK_S: one
listing of the nameservers a gateway at most, shared by every put that waits."""
STALL_RECHECK_S = 0.1
MasterCheck = Callable[[], Awaitable[bool]]
"""Is another broker its broker name's master now, in the nameservers' view (not the one this coalescer puts to)?"""
Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(slots=True, eq=False)
class _Waiting:
    """One caller's records (compared by identity: a withdrawn caller's own entry leaves the queue)."""

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
        replaced: MasterCheck | None = None,
        stall_check_s: float = STALL_CHECK_S,
        stall_recheck_s: float = STALL_RECHECK_S,
    ) -> None:
        self.put = put
        self.replaced = replaced
        self.stall_check_s = stall_check_s
        self.stall_recheck_s = stall_recheck_s
        self.was_replaced = False
        """True once its master was found replaced: the sender makes a new coalescer for the next put."""
        self._checks: set[asyncio.Task[None]] = set()
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
        try:
            return await waiting.future
        except asyncio.CancelledError:
            self._withdraw(waiting)  # a caller gone (its deadline, a disconnect) before its put went: not sent
            raise

    def _withdraw(self, waiting: _Waiting) -> None:
        try:
            self._queue.remove(waiting)
        except ValueError:
            return  # already in a put
        self.queued_bytes -= len(waiting.records)

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
        loop = asyncio.get_running_loop()
        stall = loop.call_later(self.stall_check_s, self._stalled, batch) if self.replaced is not None else None
        try:
            self.puts += 1
            answer = await self.put(b"".join(w.records for w in batch))
            outcome: Outcome | PetrelError = per_record(answer, sum(w.count for w in batch))
        except PetrelError as exc:
            outcome = exc
        except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller, never lost
            outcome = PetrelError(f"the put failed unexpectedly: {exc!r}")
        finally:
            if stall is not None:
                stall.cancel()
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

    def _stalled(self, batch: list[_Waiting]) -> None:
        check = asyncio.get_running_loop().create_task(self._check_master(batch))
        self._checks.add(check)
        check.add_done_callback(self._checks.discard)

    async def _check_master(self, batch: list[_Waiting]) -> None:
        assert self.replaced is not None
        while any(not w.future.done() for w in batch):
            try:
                replaced = await self.replaced()
            except PetrelError:  # the nameservers do not answer either: keep waiting for the put
                replaced = False
            if replaced:
                self._give_up(batch)
                return
            await asyncio.sleep(self.stall_recheck_s)

    def _give_up(self, batch: list[_Waiting]) -> None:
        """The master was replaced: the callers of `batch` (in flight) and of every queued record stop waiting."""
        self.was_replaced = True
        sent = BrokerUnavailable(
            f"broker {self.broker}'s master stopped answering and another broker is its master now: this message "
            "may be stored (on the old master, or on the new one if it was replicated); send it again only with "
            "the same Idempotency-Key",
            broker=self.broker,
            maybe_stored=True,
            master_replaced=True,
        )
        queued = BrokerUnavailable(
            f"broker {self.broker}'s master stopped answering and another broker is its master now: this message "
            "was not sent, send it again",
            broker=self.broker,
            master_replaced=True,
        )
        for waiting in batch:
            if not waiting.future.done():
                waiting.future.set_result([sent] * waiting.count)
        while self._queue:
            waiting = self._queue.popleft()
            self.queued_bytes -= len(waiting.records)
            if not waiting.future.done():
                waiting.future.set_result([queued] * waiting.count)


def master_replaced(error: PetrelError) -> bool:
    """Did a put stop waiting because its broker name got another master (`PutCoalescer` with `replaced`)?"""
    return bool(error.extensions.get("master_replaced"))


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
        self._starting = False

    async def submit(self, item: Item) -> Result | PetrelError:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result | PetrelError] = loop.create_future()
        self._queue.append((item, future))
        if self.in_flight < self.max_in_flight and not self._starting:
            self._starting = True  # at the end of this loop turn, as PutCoalescer: the turn's items go together
            loop.call_soon(self._start_soon)
        return await future

    def _start_soon(self) -> None:
        self._starting = False
        if self.in_flight < self.max_in_flight:
            self._start()

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
