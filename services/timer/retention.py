"""RetentionKeeper: the timer's pending messages outlive each broker's CommitLog retention (seed 003 Q&A 1).

A scheduled message waits in its broker's CommitLog for as long as its delay,
which may be longer than the broker keeps a segment. The timer owns what is
pending, so every `interval_ms`, right after a checkpoint, for each broker it:

1. reports its checkpointed cursors and the lowest CommitLog offset of its wheel's
   pending entries: the broker's retention never deletes past what they need;
2. rolls what the broker's answer says is getting old (`roll_below`: half its
   retention gone, or wanted by disk pressure): each such message is re-put at
   the log's end in the timer topic, same message id and due time; then its old
   wheel entry is cancelled, or its delay-level cursor moves past it. The copy
   comes back through the timer topic like any exact-time message.

Only a checkpointed state is reported, so a crash never makes the timer need
an offset it said it did not. A crash between a re-put and the checkpoint that
records it leaves both the old entry and the copy: a duplicate, after a crash only.

A roll carries what the timer knows of each message (id, size, due time), as a delivery
does: the broker rolls the message from where its id finds it, or answers it `lost` (a
failover gave the broker name a log with another message at the offset): the entry is
dropped, logged and counted (`lost`), never rolled as the other message.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

from libs.broker_api.client import BrokerClient
from libs.broker_api.frames import DueUnit
from libs.broker_api.schemas import ExpectedRecord
from libs.errors import PetrelError
from libs.names import SCHEDULE_TOPIC
from libs.timer import MessageRef, TimerRecord, TimerStore
from services.timer.progress import UNKNOWN, TimerProgress

log = logging.getLogger(__name__)

ROLL_CHUNK = 1000


class RetentionKeeper:
    def __init__(
        self, store: TimerStore, progress: TimerProgress, brokers: BrokerClient, *, interval_ms: int = 10_000
    ) -> None:
        self.store = store
        self.progress = progress
        self.brokers = brokers
        self.interval_ms = interval_ms
        self.rolled = 0
        self.lost = 0
        self._roll_below: dict[str, tuple[int, int]] = {}
        """broker -> (roll below, log start) of its last answer."""
        self._kept_at = -(10**18)

    def due(self, now: int) -> bool:
        return now - self._kept_at >= self.interval_ms

    async def keep(self, brokers: dict[str, str], now: int) -> None:
        """Report and roll on every broker; call right after a checkpoint."""
        self._kept_at = now
        for broker, address in brokers.items():
            try:
                await self._keep_on(broker, address, now)
            except PetrelError as exc:
                log.warning(
                    "timer: keeping %s's scheduled messages within retention: %s; will try again", broker, exc.detail
                )

    async def _keep_on(self, broker: str, address: str, now: int) -> None:
        cursors = self.progress.cursors(broker)
        below, start = self._roll_below.get(broker, (0, 0))
        lowest, doomed = await asyncio.to_thread(self.store.pending_offsets, cursors.store_id, below, start)
        below, start = await self.brokers.report(broker, address, dict(cursors.levels), cursors.timer, lowest)
        self._roll_below[broker] = (below, start)
        await self._roll_wheel(broker, address, doomed)
        for queue_id in list(cursors.levels):
            await self._roll_level(broker, address, queue_id, below, now)

    async def _roll_wheel(self, broker: str, address: str, doomed: list[tuple[int, int]]) -> None:
        live = []
        for position, offset in doomed:
            if (broker, offset) in self.progress.cancelled:  # cancelled: nothing to keep
                self.store.cancel(position)
                self.progress.cancelled.discard((broker, offset))
            else:
                live.append((position, offset))
        for start in range(0, len(live), ROLL_CHUNK):
            chunk = live[start : start + ROLL_CHUNK]
            expected = [_expected(self.store.log.read(position)) for position, _ in chunk]
            results = await self.brokers.roll(broker, address, [offset for _, offset in chunk], expected)
            for (position, offset), result in zip(chunk, results, strict=True):
                if result["status"] == "rolled":
                    self.store.cancel(position)
                    self._carry_cancellation(broker, offset, result["new_offset"])
                    self.rolled += 1
                elif result["status"] == "lost":
                    self.store.cancel(position)
                    self._lost(broker, offset, result)

    async def _roll_level(self, broker: str, address: str, queue_id: int, below: int, now: int) -> None:
        """Roll the level's leading units below `below`, and move its cursor past those rolled.

        A unit the broker refuses to roll (its record is unreadable) goes to the wheel at its
        due time, where delivery retries and, in the end, reports it: the cursor passes it,
        so a copy rolled after it is never rolled or delivered twice.
        """
        cursors = self.progress.cursors(broker)
        cursor = cursors.levels[queue_id]
        units = await self.brokers.units(broker, address, SCHEDULE_TOPIC, queue_id, cursor, ROLL_CHUNK)
        old = list(itertools.takewhile(lambda u: u.physical_offset < below, units))
        wanted = [u for u in old if not self._cancelled(broker, u)]
        expected = [ExpectedRecord(message_id=u.message_id, size=u.size, due_ms=u.due_ms) for u in wanted]
        offsets = [u.physical_offset for u in wanted]
        results = await self.brokers.roll(broker, address, offsets, expected) if wanted else []
        outcome = {u.physical_offset: r for u, r in zip(wanted, results, strict=True)}
        passed = 0
        for unit in old:
            result = outcome.get(unit.physical_offset, {"status": "cancelled"})
            if result["status"] == "failed":  # the store refused the write: this and every later one not stored
                log.warning("timer: rolling level %d on %s: %s; will try again", queue_id + 1, broker, result["detail"])
                break
            if result["status"] == "rolled":
                self._carry_cancellation(broker, unit.physical_offset, result["new_offset"])
                self.rolled += 1
            elif result["status"] == "lost":
                self._lost(broker, unit.physical_offset, result)
            elif result["status"] == "refused":
                ref = MessageRef(cursors.store_id, unit.physical_offset, unit.size, unit.message_id)
                self.store.enqueue(min(unit.due_ms, now + self.store.max_delay_ms), ref, now)
            self.progress.cancelled.discard((broker, unit.physical_offset))
            passed += 1
        cursors.levels[queue_id] = cursor + passed

    def _lost(self, broker: str, offset: int, result: dict[str, object]) -> None:
        self.lost += 1
        log.error("timer: %s lost the scheduled message at %d, not rolled: %s", broker, offset, result.get("detail"))

    def _carry_cancellation(self, broker: str, old: int, new: int) -> None:
        """A cancellation that came in while the message was being rolled applies to its copy."""
        if (broker, old) in self.progress.cancelled:
            self.progress.cancelled.discard((broker, old))
            self.progress.cancel(broker, new, self.progress.cancelled_in.pop((broker, old), UNKNOWN))

    def _cancelled(self, broker: str, unit: DueUnit) -> bool:
        return (broker, unit.physical_offset) in self.progress.cancelled


def _expected(record: TimerRecord) -> ExpectedRecord:
    return ExpectedRecord(message_id=record.message_id, size=record.size, due_ms=record.due_ms)
