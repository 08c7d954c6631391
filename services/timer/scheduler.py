"""TimerScheduler: every scan interval, deliver what is due on every broker.

- Delay levels: each level's queue is ordered by due time (same delay, stored
  in order), so a cursor per (broker, level) walks it and stops at the first
  unit not yet due; its due time is remembered, so an idle level costs nothing.
- Exact times: units of the timer topic are read as they arrive and put in the
  TimerStore (TimerLog + TimerWheel); each scan takes what the wheel says is due,
  rolls what is still beyond its window, and delivers the rest.
- Delivery asks the broker to put the stored message in its real topic by
  CommitLog offset (the body does not travel twice); it answers per entry. One
  that could not be tried or stored (broker away, store full) is tried again
  a second later; a level waits that long, not until its next message is due.
  One the broker refused (no record at the offset, topic gone) goes to the wheel
  to be tried again after a backoff (1, 2, 4 ... 60 s), and after `max_attempts`
  refusals is dropped with a `delay_failed` event, a log line and a metric.
- Each delivery carries what the timer knows of the message (its id, size and due
  time, read with the units): the broker delivers the record at the offset only if
  it is that message, else the message from where its id finds it, else answers it
  lost (a failover gave the broker name a log with other bytes there, issue 27). A
  lost one is dropped, counted and logged here (the broker emits `delay_lost`).
  Entries that were stored are never put again (except after a crash).
- Progress (cursors, the wheel's read position) is saved after the deliveries
  it covers, every checkpoint interval: a crash repeats at most what was in
  flight, and loses nothing.
- Retention (retention.py): right after a checkpoint, every `retention_check_ms`,
  each broker hears the lowest CommitLog offset the timer still needs, and
  pending messages getting old there are rolled back into its CommitLog.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from libs.broker_api.client import BrokerClient
from libs.broker_api.frames import DueUnit
from libs.broker_api.nameservers import NameserverClient
from libs.broker_api.schemas import ExpectedRecord
from libs.errors import PetrelError
from libs.events import EventWriter
from libs.names import SCHEDULE_TOPIC, TIMER_TOPIC
from libs.timer import Action, MessageRef, TimerEntry, TimerStore
from services.timer.progress import WHEEL, TimerProgress
from services.timer.retention import RetentionKeeper

log = logging.getLogger(__name__)

UNITS_PER_READ = 1000
DELIVERY_CHUNK = 1000
"""Offsets per delivery request (the broker takes at most 1024)."""
RETRY_MS = 1000
"""How long a delivery that could not be tried (broker away, store full) waits; also a refusal's first backoff."""
MAX_BACKOFF_MS = 60_000
DEFAULT_MAX_ATTEMPTS = 8
"""Refused deliveries of one message (1, 2, 4 ... 60 s apart) before it is dropped with `delay_failed`."""
SCAN_LAG_MS = 2
"""How long after an interval boundary a scan starts (the slot that just ended is then complete)."""
LATENESS_WINDOW = 10_000


@dataclass
class TimerCounters:
    delivered: int = 0
    rolled: int = 0
    cancelled: int = 0
    retried: int = 0
    failed: int = 0
    lost: int = 0
    lateness_ms: deque[int] = field(default_factory=lambda: deque(maxlen=LATENESS_WINDOW))
    level_pending: dict[tuple[str, int], int] = field(default_factory=dict)


class Result(enum.Enum):
    DELIVERED = "delivered"
    LATER = "later"  # not tried or not stored for a reason of the broker's: try again in RETRY_MS
    LOST = "lost"  # the message is not in the broker's log any more (a failover): dropped, counted, logged


@dataclass(frozen=True, slots=True)
class Refusal:
    """The broker refused this one entry (no record at the offset, topic gone ...)."""

    broker: str
    offset: int
    due_ms: int
    result: dict[str, Any]


Outcome = Result | Refusal


class TimerScheduler:
    def __init__(
        self,
        store: TimerStore,
        progress: TimerProgress,
        nameservers: NameserverClient,
        brokers: BrokerClient,
        events: EventWriter,
        *,
        broker_refresh_seconds: float = 5.0,
        checkpoint_interval_ms: int = 1000,
        max_delay_ms: int = 30 * 86_400_000,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        retention_check_ms: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.progress = progress
        self.nameservers = nameservers
        self.brokers = brokers
        self.events = events
        self.broker_refresh_seconds = broker_refresh_seconds
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.max_delay_ms = max_delay_ms
        self.max_attempts = max_attempts
        self.keeper = RetentionKeeper(store, progress, brokers, interval_ms=retention_check_ms)
        self.clock = clock
        self.counters = TimerCounters()
        self._addresses: dict[str, str] = {}
        self._addresses_at = -1e9
        self._next_due: dict[tuple[str, int], int] = {}
        self._checkpointed_at = 0

    def pending(self, wheel_pending: int) -> tuple[dict[int, int], int]:
        """Messages waiting per delay level (queue id) and in the wheel, less those cancelled.

        A cancelled message keeps its place until its time comes (it is then passed over),
        but it is no longer pending: it is counted as cancelled from the moment it is.
        """
        levels: dict[int, int] = {}
        for (_, queue_id), count in self.counters.level_pending.items():
            levels[queue_id] = levels.get(queue_id, 0) + count
        cancelled = self.progress.waiting_cancelled()
        left = {queue_id: max(0, count - cancelled.get(queue_id, 0)) for queue_id, count in levels.items()}
        return left, max(0, wheel_pending - cancelled.get(WHEEL, 0))

    def next_due_times(self) -> list[int]:
        """Due times of the first waiting message of each delay level seen so far."""
        return list(self._next_due.values())

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def tick(self) -> None:
        now = self.now_ms()
        for broker, address in (await self._broker_addresses()).items():
            try:
                await self._scan_levels(broker, address, now)
                await self._ingest_timers(broker, address, now)
            except PetrelError as exc:
                log.warning("timer: broker %s at %s: %s; will try again", broker, address, exc.detail)
        await self._fire_wheel(now)
        keep = self.keeper.due(now)
        if keep or now - self._checkpointed_at >= self.checkpoint_interval_ms:
            self.checkpoint(now)
        if keep:  # right after a checkpoint: only checkpointed needs are reported
            await self.keeper.keep(self._addresses, now)

    def checkpoint(self, now: int | None = None) -> None:
        self.store.checkpoint()
        self.progress.save()
        self._checkpointed_at = self.now_ms() if now is None else now

    async def _broker_addresses(self) -> dict[str, str]:
        if time.monotonic() - self._addresses_at >= self.broker_refresh_seconds:
            try:
                masters = await self.nameservers.masters()
            except PetrelError as exc:
                log.warning("timer: no nameserver answered (%s); using the brokers known before", exc.detail)
            else:
                self._addresses = dict(masters)
                self._addresses_at = time.monotonic()
        return self._addresses

    # ---- delay levels --------------------------------------------------------------------

    async def _scan_levels(self, broker: str, address: str, now: int) -> None:
        cursors = self.progress.cursors(broker)
        ends = await self.brokers.topic_offsets(broker, address, SCHEDULE_TOPIC)
        if cursors.starts.get(SCHEDULE_TOPIC) != ends.incarnation:
            for queue_id, end in ends.ends_at_start().items():
                cursors.levels[queue_id] = _below(
                    cursors.levels.get(queue_id, 0), end, f"{broker} level {queue_id + 1}"
                )
            cursors.starts[SCHEDULE_TOPIC] = ends.incarnation
        for queue_id, (low, high) in ends.ranges().items():
            cursor = max(cursors.levels.get(queue_id, 0), low)
            cursors.levels[queue_id] = cursor
            self.counters.level_pending[(broker, queue_id)] = high - cursor
            if cursor >= high or self._next_due.get((broker, queue_id), 0) > now:
                continue
            units = await self.brokers.units(broker, address, SCHEDULE_TOPIC, queue_id, cursor, UNITS_PER_READ)
            # Only the leading run of due units: a queue is passed in order, whatever the clock says.
            due = list(itertools.takewhile(lambda u: u.due_ms <= now, units))
            done = await self._deliver_units(broker, address, due, now)
            if done < len(due):
                self._next_due[(broker, queue_id)] = now + RETRY_MS
            elif len(due) < len(units):
                self._next_due[(broker, queue_id)] = units[len(due)].due_ms
            else:
                self._next_due.pop((broker, queue_id), None)
            cursors.levels[queue_id] = cursor + done
            self.counters.level_pending[(broker, queue_id)] = high - cursors.levels[queue_id]

    async def _deliver_units(self, broker: str, address: str, due: list[DueUnit], now: int) -> int:
        """Deliver in order; how many units are passed (delivered, refused and handed to the wheel, cancelled)."""
        wanted = [u for u in due if not self._is_cancelled(broker, u.physical_offset)]
        store_id = self.progress.cursors(broker).store_id
        refs = [MessageRef(store_id, u.physical_offset, u.size, u.message_id) for u in wanted]
        results = await self._deliver(
            broker, address, [(ref, u.due_ms) for ref, u in zip(refs, wanted, strict=True)], now
        )
        held = next((i for i, r in enumerate(results) if r is Result.LATER), len(wanted))
        for ref, result in zip(refs[:held], results[:held], strict=True):
            if isinstance(result, Refusal):
                self._refused(ref, 0, 0, result, now)
        done = len(due) if held == len(wanted) else due.index(wanted[held])
        for unit in due[:done]:  # a cancellation is forgotten only once its unit is passed
            self._forget_cancelled(broker, unit.physical_offset)
        return done

    # ---- exact times ---------------------------------------------------------------------

    async def _ingest_timers(self, broker: str, address: str, now: int) -> None:
        cursors = self.progress.cursors(broker)
        ends = await self.brokers.topic_offsets(broker, address, TIMER_TOPIC)
        if cursors.starts.get(TIMER_TOPIC) != ends.incarnation:
            cursors.timer = _below(cursors.timer, ends.ends_at_start().get(0, cursors.timer), f"{broker} exact times")
            cursors.starts[TIMER_TOPIC] = ends.incarnation
        low, high = ends.ranges().get(0, (0, 0))
        cursors.timer = max(cursors.timer, low)
        while cursors.timer < high:
            units = await self.brokers.units(broker, address, TIMER_TOPIC, 0, cursors.timer, UNITS_PER_READ)
            if not units:
                break
            for unit in units:
                due = min(unit.due_ms, now + self.max_delay_ms)
                ref = MessageRef(cursors.store_id, unit.physical_offset, unit.size, unit.message_id)
                self.store.enqueue(due, ref, now)
            cursors.timer += len(units)

    async def _fire_wheel(self, now: int) -> None:
        by_broker: dict[int, list[TimerEntry]] = {}
        for entry in self.store.due(now):
            if entry.action is Action.ROLL:
                self._roll(entry, now)
            else:
                by_broker.setdefault(entry.ref.store_id, []).append(entry)
        for store_id, entries in by_broker.items():
            broker = self.progress.broker_of(store_id)
            address = self._addresses.get(broker or "")
            wanted = [e for e in entries if not self._forget_cancelled(broker or "", e.ref.phy_offset)]
            results: list[Outcome] = [Result.LATER] * len(wanted)
            if address is not None and broker is not None:
                results = await self._deliver(broker, address, [(e.ref, e.due_ms) for e in wanted], now)
            for entry, result in zip(wanted, results, strict=True):
                if result is Result.LATER:
                    self.store.enqueue(
                        now + RETRY_MS, entry.ref, now, roll_count=entry.roll_count, attempts=entry.attempts
                    )
                    self.counters.retried += 1
                elif isinstance(result, Refusal):
                    self._refused(entry.ref, entry.roll_count, entry.attempts, result, now)

    def _roll(self, entry: TimerEntry, now: int) -> None:
        self.store.enqueue(entry.due_ms, entry.ref, now, roll_count=entry.roll_count + 1, attempts=entry.attempts)
        self.counters.rolled += 1
        self.events.emit(
            "delay_rolled", message_id=None, topic=None, deliver_at=entry.due_ms, roll_times=entry.roll_count + 1
        )

    # ---- both ----------------------------------------------------------------------------

    async def _deliver(self, broker: str, address: str, due: list[tuple[MessageRef, int]], now: int) -> list[Outcome]:
        """Deliver (message, due) pairs in chunks the broker takes; an outcome per pair.

        Once a chunk cannot be answered or stored, it and every later pair are LATER.
        """
        outcomes: list[Outcome] = []
        for start in range(0, len(due), DELIVERY_CHUNK):
            chunk = due[start : start + DELIVERY_CHUNK]
            outcomes += await self._deliver_chunk(broker, address, chunk, now)
            if outcomes and outcomes[-1] is Result.LATER:
                break
        return outcomes + [Result.LATER] * (len(due) - len(outcomes))

    async def _deliver_chunk(
        self, broker: str, address: str, due: list[tuple[MessageRef, int]], now: int
    ) -> list[Outcome]:
        expected = [ExpectedRecord(message_id=ref.message_id, size=ref.size, due_ms=due_ms) for ref, due_ms in due]
        try:
            results = await self.brokers.deliver(broker, address, [ref.phy_offset for ref, _ in due], expected)
        except PetrelError as exc:
            log.warning("timer: delivering %d messages to %s failed: %s", len(due), broker, exc.detail)
            return [Result.LATER] * len(due)
        outcomes: list[Outcome] = []
        for result, (ref, due_ms) in zip(results, due, strict=True):
            if result["status"] == "delivered":
                self.counters.delivered += 1
                self.counters.lateness_ms.append(max(0, now - due_ms))
                outcomes.append(Result.DELIVERED)
            elif result["status"] == "lost":
                self.counters.lost += 1
                log.error("timer: %s lost the scheduled message at %d: %s", broker, ref.phy_offset, result["detail"])
                outcomes.append(Result.LOST)
            elif result["status"] == "refused":
                outcomes.append(Refusal(broker, ref.phy_offset, due_ms, result))
            else:  # not stored, nor any later one: the store itself refused (full, flush ...)
                log.warning(
                    "timer: %s did not store the message at %d: %s", broker, ref.phy_offset, result.get("detail")
                )
                outcomes.append(Result.LATER)
        return outcomes

    def _refused(self, ref: MessageRef, roll_count: int, attempts: int, refusal: Refusal, now: int) -> None:
        """Try a refused delivery again after a backoff; after `max_attempts` tries drop it, loudly."""
        attempts += 1
        if attempts < self.max_attempts:
            backoff = min(RETRY_MS << (attempts - 1), MAX_BACKOFF_MS)
            self.store.enqueue(now + backoff, ref, now, roll_count=roll_count, attempts=attempts)
            self.counters.retried += 1
            return
        self.counters.failed += 1
        result = refusal.result
        log.error(
            "timer: dropping the scheduled message %s (topic %s) at %s/%d after %d refused deliveries: %s",
            result.get("message_id"),
            result.get("topic"),
            refusal.broker,
            refusal.offset,
            attempts,
            result.get("detail"),
        )
        self.events.emit(
            "delay_failed",
            message_id=result.get("message_id"),
            topic=result.get("topic"),
            deliver_at=refusal.due_ms,
            attempts=attempts,
            reason=f"{result.get('type')}: {result.get('detail')}",
            broker=refusal.broker,
            physical_offset=refusal.offset,
        )

    def _is_cancelled(self, broker: str, physical_offset: int) -> bool:
        return (broker, physical_offset) in self.progress.cancelled

    def _forget_cancelled(self, broker: str, physical_offset: int) -> bool:
        """True when the message was cancelled: its time has come, so the cancellation is done with."""
        if (broker, physical_offset) in self.progress.cancelled:
            self.progress.cancelled.discard((broker, physical_offset))  # counted when it was cancelled
            return True
        return False

    async def run(self, interval_ms: int) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # the timer must outlive one failed scan
                log.exception("timer: a scan failed; the next one tries again")
            # Scan just after the next interval boundary: a wheel slot is then fired
            # as soon as it ends, not up to one more interval later.
            await asyncio.sleep((interval_ms - self.now_ms() % interval_ms + SCAN_LAG_MS) / 1000)


def _below(cursor: int, end_at_start: int, queue: str) -> int:
    """A cursor checked against its queue's end when the broker started (once per start).

    Past it only when the broker lost a CommitLog tail (an ASYNC_FLUSH crash): the queue's
    offsets are used again from that end, and a cursor left ahead would skip what is stored there.
    """
    if cursor > end_at_start:
        log.warning(
            "timer: cursor of %s at %d is past the queue's end %d when its broker started (a lost tail): lowered",
            queue,
            cursor,
            end_at_start,
        )
        return end_at_start
    return cursor
