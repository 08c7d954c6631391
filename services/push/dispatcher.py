"""Dispatcher: one subscription's deliveries, from the group's leased messages to the endpoint's answers.

A receive loop leases the group's messages of the topic (as a consumer would,
through every broker holding it, long polling) while there is room: fewer
deliveries in flight than the concurrency window, no Retry-After running and
the circuit closed. Each message then has a task of its own:

1. wait until sending is allowed: the subscription's Retry-After, the circuit
   (open: only one probe after its wait), the rate cap;
2. keep the lease: one that would end before the answer could come is
   extended first (the handle changes; the POST carries the new one);
3. POST it (services.push.payloads renders and signs) and judge the answer
   (services.push.delivery): acked -> ack; deferred -> the lease is the
   receiver's; failed -> nack with the reason (the group's retry levels, then
   its DLQ); gone -> the subscription is disabled; throttled -> the window
   halves, the circuit counts it, and the same message is tried again after
   the Retry-After or a backoff, its lease kept: the try never counts as an
   attempt of the message.

Stopping (pause, delete, 410, shutdown) lets a POST under way finish; a message
waiting to be tried again is given back to the group (the broker counts that
as a failed attempt). A message whose lease could not be kept (the broker did
not answer in time) is left to the group, which delivers it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Final

from libs.broker_api.receiver import Receive, Receiver
from libs.codec import iter_records
from libs.errors import PetrelError
from libs.push_api.schemas import SubscriptionState, SubscriptionStatus
from services.push.attempts import Attempt, AttemptLog, Outcome
from services.push.delivery import Endpoint, Verdict
from services.push.flow import (
    Backoff,
    CircuitBreaker,
    CircuitState,
    ConcurrencyWindow,
    RateLimiter,
    retry_after_seconds,
)
from services.push.leases import GroupLeases
from services.push.payloads import PushedMessage, pushed_message, render
from services.push.settings import PushSettings
from services.push.subscriptions import Subscription

log = logging.getLogger(__name__)

LEASE_MARGIN_SECONDS: Final = 2.0
"""a lease is extended when it would end less than this after the endpoint's timeout"""
RECEIVE_BACKOFF_SECONDS: Final = (0.5, 30.0)


GoneCallback = Callable[[Subscription, str], Awaitable[None]]
"""told when the endpoint answered 410 Gone, with the answer: disables the subscription (and stops this)"""


@dataclass(slots=True)
class Held:
    message: PushedMessage


class Dispatcher:
    def __init__(
        self,
        subscription: Subscription,
        settings: PushSettings,
        receiver: Receiver,
        leases: GroupLeases,
        endpoint: Endpoint,
        attempts: AttemptLog,
        on_gone: GoneCallback,
    ) -> None:
        self.subscription = subscription
        self.settings = settings
        self.receiver = receiver
        self.leases = leases
        self.endpoint = endpoint
        self.attempts = attempts
        self.on_gone = on_gone
        self.window = ConcurrencyWindow(subscription.max_in_flight)
        self.rate = RateLimiter(subscription.rate_per_second)
        self.breaker = CircuitBreaker(
            settings.circuit_failures, settings.circuit_open_seconds, settings.circuit_open_max_seconds
        )
        self.backoff = Backoff()
        self.retry_after_until: float | None = None
        """time.time() until which the endpoint asked to be left alone"""
        self.deliveries: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        self._stopping = False
        self._loop_task: asyncio.Task[None] | None = None

    # ---- life ---------------------------------------------------------------------------

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._receive_loop(), name=f"push {self.subscription.key}")

    def reconfigure(self, subscription: Subscription) -> None:
        """Apply an edit that keeps the endpoint (caps, timeout, format, secrets)."""
        self.subscription = subscription
        self.window.resize(subscription.max_in_flight)
        self.rate.set_rate(subscription.rate_per_second)
        self._wake()

    async def stop(self) -> None:
        """Stop receiving; let POSTs under way finish; give back messages waiting for another try."""
        self._stopping = True
        self._wake()
        await self._stop_receiving()
        if self.deliveries:
            await asyncio.wait(self.deliveries, timeout=self.subscription.timeout_seconds + 5)
        for task in list(self.deliveries):
            task.cancel()
        await asyncio.gather(*self.deliveries, return_exceptions=True)
        await self.endpoint.close()

    async def _stop_receiving(self) -> None:
        """End the receive loop and a long poll of it under way (a message the poll leased just then is the group's
        again once that lease runs out)."""
        task = self._loop_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})

    # ---- status -------------------------------------------------------------------------

    def status(self) -> SubscriptionStatus:
        counts = self.attempts.counts
        return SubscriptionStatus(
            state=self.state(),
            in_flight=len(self.deliveries),
            window=self.window.size,
            deliveries_per_second=self.attempts.per_second(),
            acked=counts[Outcome.ACKED],
            deferred=counts[Outcome.DEFERRED],
            failed=counts[Outcome.FAILED],
            throttled=counts[Outcome.THROTTLED],
            retry_after_until=int(time.time() * 1000 + self._retry_after_left() * 1000)
            if self._retry_after_left()
            else None,
            circuit_opened_at=self.breaker.opened_at,
            last_errors=self.attempts.errors(),
        )

    def state(self) -> SubscriptionState:
        if self.subscription.disabled_reason is not None:
            return SubscriptionState.DISABLED
        if self.subscription.paused:
            return SubscriptionState.PAUSED
        if self.breaker.state is not CircuitState.CLOSED:
            return SubscriptionState.CIRCUIT_OPEN
        if self._retry_after_left() or self.attempts.in_trouble():
            return SubscriptionState.BACKING_OFF
        return SubscriptionState.ACTIVE

    def _retry_after_left(self) -> float:
        """Seconds until the endpoint's Retry-After (or the backoff after trouble) runs out; 0 when none runs."""
        return 0.0 if self.retry_after_until is None else max(0.0, self.retry_after_until - time.time())

    # ---- receiving ----------------------------------------------------------------------

    async def _receive_loop(self) -> None:
        failures = 0
        while not self._stopping:
            room = await self._room()
            if self._stopping:
                return  # stopped while waiting for room: what a receive leased now would be for no one
            try:
                received = await self.receiver.receive(
                    self.subscription.group, self.subscription.topic, self._ask(room)
                )
            except Exception as exc:
                failures += 1
                why = exc.detail if isinstance(exc, PetrelError) else repr(exc)
                self.attempts.note_error(f"receive failed: {why}")
                log.warning(
                    "push %s: receive failed: %s", self.subscription.key, why, exc_info=not isinstance(exc, PetrelError)
                )
                await asyncio.sleep(min(RECEIVE_BACKOFF_SECONDS[1], RECEIVE_BACKOFF_SECONDS[0] * 2**failures))
                continue
            failures = 0
            for batch in received:
                for lease, record in zip(batch.leases, iter_records(batch.records), strict=True):
                    message = pushed_message(record, batch.broker, self.subscription.group, lease)
                    self._spawn(Held(message))

    async def _room(self) -> int:
        """Wait until new deliveries may start; how many."""
        while True:
            self._changed.clear()
            room = self.window.size - len(self.deliveries)
            if room > 0 and self.breaker.state is CircuitState.CLOSED and not self._retry_after_left():
                return min(room, 32)
            wait = self._retry_after_left() or None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait)

    def _ask(self, room: int) -> Receive:
        sub = self.subscription
        return Receive(
            max_messages=room,
            wait_seconds=self.settings.receive_wait_seconds,
            invisible_seconds=max(sub.invisible_seconds, int(sub.timeout_seconds + LEASE_MARGIN_SECONDS) + 1),
            filter_type=sub.filter_type,
            expression=sub.expression,
        )

    def _spawn(self, held: Held) -> None:
        task = asyncio.create_task(self._deliver(held))
        self.deliveries.add(task)
        task.add_done_callback(self._delivered)

    def _delivered(self, task: asyncio.Task[None]) -> None:
        self.deliveries.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("push %s: a delivery failed", self.subscription.key, exc_info=task.exception())
        self._wake()

    def _wake(self) -> None:
        self._changed.set()

    # ---- one message --------------------------------------------------------------------

    async def _deliver(self, held: Held) -> None:
        while True:
            if not await self._wait_to_send(held):
                return
            verdict = await self._post(held.message)
            if verdict.outcome is not Outcome.THROTTLED:
                await self._settle(held, verdict)
                return
            self._throttled(verdict)

    async def _wait_to_send(self, held: Held) -> bool:
        """Wait for the rate cap, the Retry-After and the circuit, keeping the lease; False when stopping or
        when the lease could not be kept. The lease is kept right before the circuit is asked: a probe it
        lets through is always sent (its answer closes or reopens the circuit)."""
        await self.rate.acquire()
        while True:
            if self._stopping:
                await self._give_back(held)
                return False
            if not await self._keep_lease(held):
                return False
            if not self._retry_after_left() and self.breaker.allow():
                return True
            self._changed.clear()
            wait = self._lease_left(held) - self.subscription.timeout_seconds - LEASE_MARGIN_SECONDS
            if self._retry_after_left():
                wait = min(wait, self._retry_after_left())
            else:
                wait = min(wait, max(0.05, self.breaker.wait_seconds()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(0.0, wait))

    async def _keep_lease(self, held: Held) -> bool:
        """Extend a lease that would end before an answer could come; False (logged as lost) when it ended."""
        sub = self.subscription
        if self._lease_left(held) > sub.timeout_seconds + LEASE_MARGIN_SECONDS:
            return True
        invisible = max(sub.invisible_seconds, sub.timeout_seconds + LEASE_MARGIN_SECONDS * 2)
        try:
            lease = await self.leases.extend(sub.group, held.message.receipt_handle, int(invisible * 1000))
        except PetrelError as exc:
            self._record(held.message, Verdict(Outcome.LOST, None, 0, f"the lease could not be kept: {exc.detail}"))
            return False
        held.message = replace(held.message, receipt_handle=lease.receipt_handle, invisible_until=lease.invisible_until)
        return True

    def _lease_left(self, held: Held) -> float:
        return held.message.invisible_until / 1000 - time.time()

    async def _post(self, message: PushedMessage) -> Verdict:
        sub = self.subscription
        outgoing = render(message, sub.payload_format, sub.signing_secrets(int(time.time() * 1000)), time.time())
        verdict = await self.endpoint.post(outgoing.body, outgoing.headers, sub.timeout_seconds)
        self._record(message, verdict)
        return verdict

    def _record(self, message: PushedMessage, verdict: Verdict) -> None:
        at = int(time.time() * 1000) - verdict.latency_ms
        self.attempts.record(
            Attempt(
                at,
                message.message_id,
                message.topic,
                message.delivery_attempt,
                verdict.outcome,
                verdict.status,
                verdict.latency_ms,
                verdict.error,
            )
        )

    def _throttled(self, verdict: Verdict) -> None:
        self.window.on_trouble()
        self.breaker.record_trouble()
        delay = retry_after_seconds(verdict.retry_after, time.time(), self.settings.max_retry_after_seconds)
        if delay is None:
            delay = self.backoff.next_wait_seconds()
        until = time.time() + delay
        if self.retry_after_until is None or until > self.retry_after_until:
            self.retry_after_until = until
        self._wake()

    async def _settle(self, held: Held, verdict: Verdict) -> None:
        closing = self.breaker.state is not CircuitState.CLOSED
        self.breaker.record_success()  # the endpoint answered: a probe's success closes the circuit
        if closing:
            self.window.reset()
        self.window.on_success()
        self.backoff.reset()
        self._wake()
        sub, handle = self.subscription, held.message.receipt_handle
        try:
            if verdict.outcome is Outcome.ACKED:
                await self.leases.ack(sub.group, handle)
            elif verdict.outcome is Outcome.FAILED:
                await self.leases.nack(sub.group, handle, f"push to {self.attempts.endpoint}: {verdict.error}")
            elif verdict.outcome is Outcome.GONE:
                self._stopping = True
                self._wake()
                await self._give_back(held)
                await self.on_gone(sub, verdict.error or "HTTP 410")
        except PetrelError as exc:
            log.warning("push %s: %s of %s failed: %s", sub.key, verdict.outcome, held.message.message_id, exc.detail)

    async def _give_back(self, held: Held) -> None:
        """End the lease now (only when stopping). Receiving stops first: a long poll of ours still waiting would
        lease the message again, be cancelled unread by the stop, and leave the message to wait out that lease."""
        await self._stop_receiving()
        try:
            await self.leases.give_back(self.subscription.group, held.message.receipt_handle)
        except PetrelError as exc:
            log.info("push %s: giving back %s: %s", self.subscription.key, held.message.message_id, exc.detail)
