"""TimerStore: exact-time delivery storage, a TimerLog and a TimerWheel together (RocketMQ 5's TimerMessageStore).

Directory layout::

    timerlog2/<20-digit position>  TimerLog segments (see timer_log.py; a first-format `timerlog/` is
                                   copied into it at open, libs.timer.legacy_log)
    timerwheel                     the wheel (see timer_wheel.py)
    checkpoint                     committed read position, log end, counters (see timer_checkpoint.py)
    abort                          exists while the store is open; at open it means a crash

Time is always passed in (`now_ms`), never read from a clock, so that callers
and tests decide it. Ticks are `ms // precision_ms`; a slot is fired once its
last millisecond is reached, so nothing is returned before its due time and
at most `precision_ms - 1` ms after (plus the caller's polling interval).

Rolling (the seed's rule, RocketMQ's `timerRollWindowSlots`): a message due
`roll_window_ms` (default half the window) or more after `now_ms`, or beyond
the last tick the wheel may hold, is put in the slot at `now + roll_window_ms`
(clamped to that last tick) flagged ROLLED, keeping its real due time. When
that slot fires, `due` returns it with `Action.ROLL` unless its real due tick
has been reached; the caller re-enqueues it with `roll_count + 1` (in
RocketMQ, after writing it back to the CommitLog so that it outlives the
CommitLog's retention). A message due in the past goes in the next slot to fire.

The last tick the wheel may hold is `committed + slot_count - 1`, where
`committed` is the read tick of the last checkpoint: so after a crash every
record in a slot at or after the committed read tick fits the ring without
colliding, and the rebuild finds them all. For the same reason `due` stops one
window past the committed read tick until `checkpoint()` is called.

Delivery is at least once: `due` advances the read position in memory only;
`checkpoint()` (which the caller calls after it has fired what `due` returned)
syncs the log and the wheel and makes the read position durable. A crash
before that returns those entries again. `close()` is a checkpoint too.

Cancellation sets the CANCELLED flag of the record in place (`cancel(position)`,
the position `enqueue` returned): it costs no memory, is as durable as the log
and needs nothing at recovery. After a roll the message has a new position
(the one the re-enqueue returned); cancelling the old one returns False.

Memory: no per-entry Python objects. Resident memory is the interpreter plus
the pages of the maps that are touched: 72 bytes of TimerLog and at most 32
bytes of wheel per entry, page cache that the kernel can drop once synced.
1,000,000 pending entries are a 72 MB log and, at the default geometry, a
194 MB wheel file. `due` builds a list of the entries it returns.

Not thread-safe: one thread enqueues, fires and checkpoints; only
`TimerLog.sync` may run in another thread.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Final

from libs.store.mapped_file import fsync_directory
from libs.timer import legacy_log
from libs.timer.models import Action, MessageRef, TimerEntry, TimerStats
from libs.timer.recovery import rebuild_wheel
from libs.timer.timer_checkpoint import TimerCheckpoint
from libs.timer.timer_log import (
    CANCELLED,
    DEFAULT_SEGMENT_BYTES,
    RECORD_SIZE,
    ROLLED,
    CorruptTimerLog,
    TimerLog,
    TimerRecord,
    attempts_flags,
)
from libs.timer.timer_wheel import DAY_MS, TimerWheel

DEFAULT_MAX_DELAY_MS: Final = 30 * DAY_MS


class TimerStore:
    def __init__(
        self,
        directory: Path,
        *,
        now_ms: int,
        precision_ms: int = 100,
        window_ms: int = 7 * DAY_MS,
        roll_window_ms: int | None = None,
        max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        """Open (creating, or recovering after a crash) the store in `directory`.

        `now_ms` is the first read position of a new store; an existing one keeps its own.
        """
        self.precision_ms = precision_ms
        self.max_delay_ms = max_delay_ms
        roll_window_ms = window_ms // 2 if roll_window_ms is None else roll_window_ms
        if not precision_ms <= roll_window_ms < window_ms or roll_window_ms % precision_ms:
            raise ValueError("roll_window_ms must be a multiple of precision_ms below window_ms")
        self.roll_window_ms = roll_window_ms
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._checkpoint_path = directory / "checkpoint"
        self._abort_path = directory / "abort"
        segment_bytes = max(RECORD_SIZE, segment_bytes - segment_bytes % RECORD_SIZE)
        if legacy_log.has_legacy_log(directory):
            # The copy moves every record: open it as after a crash, which rebuilds the wheel from the log.
            self._abort_path.touch()
            fsync_directory(directory)
        legacy_log.upgrade(directory, segment_bytes)
        self.log = TimerLog(directory / legacy_log.LOG_DIR, segment_bytes=segment_bytes)
        try:
            self.wheel = TimerWheel(directory / "timerwheel", precision_ms=precision_ms, window_ms=window_ms)
        except BaseException:
            self.log.close()
            raise
        try:
            self._open(now_ms)
        except BaseException:
            self.log.close()
            self.wheel.close()
            raise
        self._pending_from = 0
        self._abort_path.touch()
        fsync_directory(directory)

    def _open(self, now_ms: int) -> None:
        checkpoint = TimerCheckpoint.read(self._checkpoint_path)
        if checkpoint is None:
            if next(iter(self.log.scan(0)), None) is not None:
                raise CorruptTimerLog(f"{self._checkpoint_path} is missing or damaged but the TimerLog is not empty")
            self.log.recover(0)
            if not self.wheel.created:
                self.wheel.clear()
            self._read_tick = self._committed_tick = now_ms // self.precision_ms
            self._pending = self._rolled = 0
            self.checkpoint()
        elif self._abort_path.exists():
            self._read_tick = self._committed_tick = checkpoint.read_ms // self.precision_ms
            rebuilt = rebuild_wheel(self.log, self.wheel, self._committed_tick)
            self._pending, self._rolled = rebuilt.pending, rebuilt.rolled
            self.checkpoint()
        else:
            self.log.recover(checkpoint.log_end)
            self._read_tick = self._committed_tick = checkpoint.read_ms // self.precision_ms
            self._pending, self._rolled = checkpoint.pending, checkpoint.rolled

    @property
    def _last_tick(self) -> int:
        """The last tick a slot may hold now (see the module docstring)."""
        return self._committed_tick + self.wheel.slot_count - 1

    def enqueue(self, due_ms: int, ref: MessageRef, now_ms: int, *, roll_count: int = 0, attempts: int = 0) -> int:
        """Put `ref` in the wheel to come due at `due_ms`; returns its TimerLog position.

        `attempts` (refused deliveries so far, at most 255) is kept with the entry.

        Raises ValueError when `due_ms` is more than `max_delay_ms` after `now_ms`.
        """
        if due_ms - now_ms > self.max_delay_ms:
            raise ValueError(f"due {due_ms - now_ms} ms from now; the longest delay is {self.max_delay_ms} ms")
        due_tick = due_ms // self.precision_ms
        tick, flags = max(due_tick, self._read_tick), 0
        if tick > self._last_tick or due_ms - now_ms >= self.roll_window_ms:
            roll_tick = (now_ms + self.roll_window_ms) // self.precision_ms
            roll_tick = max(min(roll_tick, self._last_tick), self._read_tick)
            if roll_tick < due_tick:
                tick, flags = roll_tick, ROLLED
        slot = self.wheel.get(tick)
        record = TimerRecord(
            -1,
            flags | attempts_flags(attempts),
            roll_count,
            due_ms,
            tick * self.precision_ms,
            ref.phy_offset,
            slot.last_pos,
            ref.store_id,
            ref.size,
            ref.message_id,
        )
        position = self.log.append(record)
        self.wheel.put(tick, position if slot.count == 0 else slot.first_pos, position, slot.count + 1)
        self._pending += 1
        self._rolled += flags & ROLLED
        return position

    def due(self, now_ms: int) -> list[TimerEntry]:
        """Every entry of the slots reached by `now_ms`, slot by slot, in enqueue order within a slot.

        Cancelled entries are left out. Advances the read position in memory; see `checkpoint`.
        """
        limit = min((now_ms + 1) // self.precision_ms - 1, self._last_tick - 1)
        entries: list[TimerEntry] = []
        for tick in range(self._read_tick, limit + 1):
            if self.wheel.get(tick).count:
                entries.extend(self._fire(tick))
        self._read_tick = max(self._read_tick, limit + 1)
        return entries

    def _fire(self, tick: int) -> list[TimerEntry]:
        slot = self.wheel.get(tick)
        chain: list[TimerRecord] = []
        position = slot.last_pos
        while position != -1 and len(chain) < slot.count:
            record = self.log.read(position)
            chain.append(record)
            position = record.prev_pos
        entries = []
        for record in reversed(chain):
            if record.cancelled:
                continue
            self._pending -= 1
            self._rolled -= record.rolled
            action = Action.DELIVER if record.due_ms // self.precision_ms <= tick else Action.ROLL
            ref = MessageRef(record.store_id, record.phy_offset, record.size, record.message_id)
            entries.append(
                TimerEntry(
                    record.position, record.due_ms, record.slot_ms, ref, record.roll_count, action, record.attempts
                )
            )
        return entries

    def cancel(self, position: int) -> bool:
        """Make sure the entry at `position` never comes due; False when it already has or is cancelled."""
        record = self.log.read(position)
        if record.cancelled or record.slot_ms // self.precision_ms < self._read_tick:
            return False
        self.log.set_flags(position, record.flags | CANCELLED)
        self._pending -= 1
        self._rolled -= record.rolled
        return True

    def checkpoint(self) -> None:
        """Commit the read position: sync the log and the wheel, then write the checkpoint file."""
        self.log.sync()
        self.wheel.sync()
        TimerCheckpoint(
            read_ms=self._read_tick * self.precision_ms,
            log_end=self.log.end,
            pending=self._pending,
            rolled=self._rolled,
            timestamp=int(time.time() * 1000),
        ).write(self._checkpoint_path)
        self._committed_tick = self._read_tick

    def pending_offsets(self, store_id: int, below: int, at_least: int = 0) -> tuple[int | None, list[tuple[int, int]]]:
        """Of the committed pending entries of `store_id` at CommitLog offsets from `at_least` on
        (lower ones are gone): the lowest offset, and the (TimerLog position, offset) of those below `below`.

        Reads the TimerLog from the first record that was pending at the last call
        (fired and cancelled records never come back), so a call costs what is pending.
        Call it right after `checkpoint` (what a crash would bring back is then what it sees).
        """
        lowest: int | None = None
        found: list[tuple[int, int]] = []
        first_pending: int | None = None
        end = self.log.end
        for record in self.log.scan(self._pending_from):
            if record.position >= end:
                break
            if record.cancelled or record.slot_ms // self.precision_ms < self._committed_tick:
                continue
            first_pending = record.position if first_pending is None else first_pending
            if record.store_id != store_id or record.phy_offset < at_least:
                continue
            lowest = record.phy_offset if lowest is None else min(lowest, record.phy_offset)
            if record.phy_offset < below:
                found.append((record.position, record.phy_offset))
        self._pending_from = end if first_pending is None else first_pending
        return lowest, found

    def stats(self, *, max_scan: int = 100_000) -> TimerStats:
        """Counters, and the first non-empty slot among the next `max_scan` (it may hold only cancelled entries)."""
        next_slot_ms = None
        for tick in range(self._read_tick, self._read_tick + min(max_scan, self.wheel.slot_count)):
            if self.wheel.get(tick).count:
                next_slot_ms = tick * self.precision_ms
                break
        return TimerStats(
            pending=self._pending,
            rolled=self._rolled,
            next_slot_ms=next_slot_ms,
            read_ms=self._read_tick * self.precision_ms,
            committed_read_ms=self._committed_tick * self.precision_ms,
            log_end=self.log.end,
        )

    def close(self) -> None:
        """Checkpoint (committing the read position), close the files and mark the shutdown clean."""
        self.checkpoint()
        self.abandon()
        self._abort_path.unlink()
        fsync_directory(self.directory)

    def abandon(self) -> None:
        """Close the files without a checkpoint, leaving what kill -9 leaves (for tests and tools)."""
        self.log.close()
        self.wheel.close()
