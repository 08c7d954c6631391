"""The values the timer store hands out: message references, due entries, statistics."""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MessageRef:
    """Where the timed message itself lives: which CommitLog, at what offset, how long; and which message it is.

    `message_id` (None for an entry written before ids were kept, or a message without a
    id of Petrel's form) lets the broker check that the record at `phy_offset` is still
    this message before delivering it: after a failover another may sit there.
    """

    store_id: int
    phy_offset: int
    size: int
    message_id: str | None = None


class Action(enum.Enum):
    DELIVER = "deliver"  # due now: put it on its real topic
    ROLL = "roll"  # still beyond the window: enqueue it again with roll_count + 1


@dataclass(frozen=True, slots=True)
class TimerEntry:
    position: int  # of its TimerLog record
    due_ms: int  # the real due time
    slot_ms: int  # the slot it came out of
    ref: MessageRef
    roll_count: int
    action: Action
    attempts: int = 0  # deliveries refused so far (retried with backoff, bounded)


@dataclass(frozen=True, slots=True)
class TimerStats:
    pending: int  # entries in the wheel not yet returned by `due`, cancelled ones excluded
    rolled: int  # how many of them are rolled entries (their real due time is later)
    next_slot_ms: int | None  # the first non-empty slot within the scan limit, or None
    read_ms: int  # slots before this time have been returned by `due`
    committed_read_ms: int  # ... and before this one, committed by `checkpoint`
    log_end: int  # TimerLog bytes written
