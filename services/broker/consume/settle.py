"""Settlement: how a lease ends — ack, nack, a visibility change, or running out.

Ack ends a lease and the message is done. Nack, or a lease that runs out, is a
failed attempt: a normal group's message is copied to `%RETRY%{group}` with the
group's backoff (delay levels 3, 4, 5 ... or exponential), or after
`max_retries` to `%DLQ%{group}`; a FIFO group's message is delivered again in
place after a suspension, so its queue keeps its order; a broadcast group has no
retries (a nack drops the message for that client; a lease that runs out
delivers it again, since the client never said it failed).

A failing lease is marked `ending` before its copy is stored, so the consumer
offset does not pass it until the copy is safe, and a late ack is told why.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from libs.broker_api.frames import Lease
from libs.broker_api.groups import GroupConfig
from libs.codec import decode_record
from libs.errors import (
    ForeignReceiptHandle,
    InvalidReceiptHandle,
    LeaseEnded,
    LeaseExpired,
    LeaseLost,
    LeaseSuperseded,
    PetrelError,
)
from libs.names import retry_topic
from libs.receipt import ReceiptHandle
from services.broker.consume.pop import PopService, owner_of
from services.broker.consume.redelivery import attempt_token, dead_letter_copy, original_topic, put_body, retry_copy
from services.broker.consume.window import ConsumeWindow, InFlight, WindowKey

log = logging.getLogger(__name__)

EXPIRED = "the lease expired"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Settlement:
    def __init__(self, pop: PopService) -> None:
        self.pop = pop

    # ---- what consumers call ---------------------------------------------------------------

    async def ack(self, group: str, texts: list[str]) -> list[PetrelError | None]:
        """End each handle's lease, in order: None for an ack, else why not; one `acked` line for the call."""
        results: list[PetrelError | None] = []
        acked: list[dict[str, object]] = []
        try:
            for text in texts:
                try:
                    acked.append(await self._ack(group, text))
                    results.append(None)
                except PetrelError as exc:
                    results.append(exc)
        finally:  # what was acked was acked, even when the call is cancelled halfway
            self.pop.events.emit_batch("acked", acked, broker=self.pop.broker, group=group)
        return results

    async def _ack(self, group: str, text: str) -> dict[str, object]:
        """End the lease; its `acked` event's own fields."""
        _, window, leased, config = await self._current(group, text)
        window.release(leased.offset)
        window.in_place_attempts.pop(leased.offset, None)
        self.pop.end_lease(leased.lease)
        self.pop.commit(window)
        if config.fifo:
            self.pop.waiters.notify(window.key.topic, window.key.queue_id)
        return {
            "message_id": leased.message_id,
            "topic": window.key.topic,
            "queue_id": window.key.queue_id,
            "queue_offset": leased.offset,
            "delivery_attempt": leased.attempt,
        }

    async def nack(
        self, group: str, text: str, delay_ms: int | None, delay_level: int | None, reason: str | None
    ) -> None:
        _, window, leased, config = await self._current(group, text)
        optional: dict[str, object] = {"reason": reason} if reason else {}
        if delay_ms is not None:
            optional["delay_ms"] = delay_ms
        self._emit("nacked", window, leased, config, **optional)
        why = f"nacked: {reason}" if reason else "nacked by the consumer"
        await self.fail(window, leased, config, why, nack=True, delay_ms=delay_ms, delay_level=delay_level)

    async def change_visibility(self, group: str, text: str, invisible_ms: int) -> Lease:
        """A new lease until now + invisible_ms. Zero gives the message back at once (a failed attempt, no backoff)."""
        handle, window, leased, config = await self._current(group, text)
        if invisible_ms == 0:
            await self.fail(window, leased, config, "given back by the consumer", delay_ms=0)
            return Lease(text, leased.attempt, self.pop.now_ms())
        old = leased.lease
        leased.lease = self.pop.next_lease()
        leased.expires_at = self.pop.now_ms() + invisible_ms
        self.pop.end_lease(old, LeaseSuperseded, f"a visibility change replaced lease {old}: use the newer handle")
        self.pop.add_timer(leased.expires_at, window.key, leased.offset, leased.lease)
        renewed = ReceiptHandle(
            handle.broker,
            handle.group,
            handle.client_id,
            handle.topic,
            handle.queue_id,
            handle.queue_offset,
            leased.lease,
            handle.epoch,
            leased.expires_at,
        )
        return Lease(renewed.encode(self.pop.signing_key), leased.attempt, leased.expires_at)

    async def _current(self, group: str, text: str) -> tuple[ReceiptHandle, ConsumeWindow, InFlight, GroupConfig]:
        """The lease a handle names, if it is still this consumer's; else why not, as a clear error."""
        handle = ReceiptHandle.decode(text, self.pop.signing_key)
        if handle.broker != self.pop.broker:
            raise InvalidReceiptHandle(f"the receipt handle was issued by broker {handle.broker}, not this one")
        if handle.group != group:
            raise ForeignReceiptHandle(f"the receipt handle belongs to group {handle.group!r}, not {group!r}")
        if handle.epoch != self.pop.epoch:
            raise LeaseLost(
                "the broker restarted after this message was received; it will be delivered again (a new handle)"
            )
        config = self.pop.groups.find(group) or GroupConfig(name=group)
        key = WindowKey(owner_of(group, handle.client_id), handle.topic, handle.queue_id)
        window = self.pop.windows.get(key)
        leased = window.in_flight.get(handle.queue_offset) if window else None
        if window is None or leased is None or leased.lease != handle.lease or leased.ending:
            raise self._ended(handle)
        if self.pop.now_ms() >= leased.expires_at:
            await self.fail(window, leased, config, EXPIRED)
            raise self._ended(handle)
        return handle, window, leased, config

    def _ended(self, handle: ReceiptHandle) -> LeaseEnded:
        why = self.pop.ended.why(handle.lease)
        if why is not None:
            return why
        if handle.expires_at <= self.pop.now_ms():
            return LeaseExpired(f"the lease expired at {_iso(handle.expires_at)}")
        return LeaseEnded("this lease is not known here any more (the group's offsets may have been reset)")

    # ---- failed attempts -------------------------------------------------------------------

    async def expire_due(self) -> int:
        """End every lease that has run out; wake FIFO queues whose suspension ended."""
        expired = 0
        for timer in self.pop.due_timers():
            window = self.pop.windows.get(timer.key)
            if timer.lease == 0:
                self.pop.waiters.notify(timer.key.topic, timer.key.queue_id)
                continue
            leased = window.in_flight.get(timer.offset) if window else None
            if window is None or leased is None or leased.lease != timer.lease or leased.ending:
                continue
            group = timer.key.owner.partition("@")[0]
            config = self.pop.groups.find(group) or GroupConfig(name=group)
            await self.fail(window, leased, config, EXPIRED)
            expired += 1
        return expired

    async def run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire_due()
                for client in self.pop.expire_clients():
                    log.info(
                        "broadcast client %s not seen for %d ms: its offsets are dropped",
                        client,
                        self.pop.clients.idle_ms,
                    )
            except Exception:
                log.exception("ending expired leases failed; will try again")

    async def fail(
        self,
        window: ConsumeWindow,
        leased: InFlight,
        config: GroupConfig,
        why: str,
        *,
        nack: bool = False,
        delay_ms: int | None = None,
        delay_level: int | None = None,
    ) -> None:
        leased.ending = True
        ended = f"{why} at attempt {leased.attempt}"
        self.pop.end_lease(leased.lease, LeaseExpired if why == EXPIRED else LeaseEnded, ended)
        try:
            if config.broadcast:
                self._broadcast_failed(window, leased, config, nack)
            elif config.fifo:
                await self._fifo_failed(window, leased, config, why, delay_ms)
            else:
                await self._hand_on(window, leased, config, why, delay_ms, delay_level)
        except Exception:
            log.exception("the failed message at %s offset %d stays in place", window.key, leased.offset)
            self._give_back(window, leased)
        else:
            window.release(leased.offset)
        self.pop.commit(window)

    def _give_back(self, window: ConsumeWindow, leased: InFlight) -> None:
        window.release(leased.offset)
        window.in_place_attempts[leased.offset] = window.in_place_attempts.get(leased.offset, 0) + 1
        window.give_back(leased.offset)
        self.pop.waiters.notify(window.key.topic, window.key.queue_id)

    def _broadcast_failed(self, window: ConsumeWindow, leased: InFlight, config: GroupConfig, nack: bool) -> None:
        if nack or leased.attempt > config.max_retries:
            window.in_place_attempts.pop(leased.offset, None)
            return
        self._give_back(window, leased)

    async def _fifo_failed(
        self, window: ConsumeWindow, leased: InFlight, config: GroupConfig, why: str, delay_ms: int | None
    ) -> None:
        if leased.attempt > config.max_retries:
            window.in_place_attempts.pop(leased.offset, None)
            await self._dead_letter(window, leased, config, why)
            return
        suspend = config.fifo_suspend_ms if delay_ms is None else delay_ms
        window.suspended_until = self.pop.now_ms() + suspend
        self.pop.add_timer(window.suspended_until, window.key, leased.offset, 0)
        self._give_back(window, leased)

    async def _hand_on(
        self,
        window: ConsumeWindow,
        leased: InFlight,
        config: GroupConfig,
        why: str,
        delay_ms: int | None,
        delay_level: int | None,
    ) -> None:
        if leased.attempt > config.max_retries:
            await self._dead_letter(window, leased, config, why)
            return
        record = decode_record(self.pop.store.read(leased.physical_offset))
        if delay_ms is None and delay_level is None:
            delay_level, delay_ms = config.retry_policy.delay(leased.attempt, self.pop.delay_levels)
        topic = original_topic(record)
        subscription = self.pop.groups.subscription(config.name, topic)
        queue_id = subscription.retry_queue_id if subscription else 0
        await self.pop.ensure_topic(retry_topic(config.name), queue_id + 1)
        now = self.pop.now_ms()
        token = attempt_token(config.name, record, leased.attempt)
        copy = retry_copy(record, retry_topic(config.name), queue_id, leased.attempt, delay_level, delay_ms, now, token)
        await self._put(put_body(copy, self.pop.delay_levels, now))
        effective = delay_ms if delay_level is None else self.pop.delay_levels[delay_level - 1]
        self.pop.events.emit(
            "retried",
            message_id=leased.message_id,
            topic=topic,
            group=config.name,
            delivery_attempt=leased.attempt,
            delay_ms=effective or 0,
        )

    async def _dead_letter(self, window: ConsumeWindow, leased: InFlight, config: GroupConfig, why: str) -> None:
        record = decode_record(self.pop.store.read(leased.physical_offset))
        reason = f"{why} at attempt {leased.attempt} (max_retries {config.max_retries})"
        dlq = await self.pop.ensure_dlq(config.name)
        token = attempt_token(config.name, record, leased.attempt)
        await self._put(put_body(dead_letter_copy(record, dlq, leased.attempt, reason, token), (), self.pop.now_ms()))
        self.pop.events.emit(
            "dead_lettered",
            message_id=leased.message_id,
            topic=original_topic(record),
            group=config.name,
            delivery_attempt=leased.attempt,
            reason=reason,
        )

    async def _put(self, body: bytes) -> None:
        """Store a retry or dead-letter copy; raise only when it was not stored (the message then stays in place).

        A flush timeout (SYNC_FLUSH) stored the copy: it counts as stored, never to be put
        again. The copy's DEDUP token makes a put of it made again answer the stored one.
        """
        outcome = await self.pop.store.put_reporting(body, dedupe=True)
        if outcome.failure is not None:
            raise outcome.failure
        if outcome.not_durable is not None:
            log.warning("a retry or dead-letter copy is stored but not confirmed durable: %s", outcome.not_durable)

    def _emit(self, event: str, window: ConsumeWindow, leased: InFlight, config: GroupConfig, **extra: object) -> None:
        self.pop.events.emit(
            event,
            message_id=leased.message_id,
            topic=window.key.topic,
            queue_id=window.key.queue_id,
            queue_offset=leased.offset,
            broker=self.pop.broker,
            group=config.name,
            delivery_attempt=leased.attempt,
            **extra,
        )
