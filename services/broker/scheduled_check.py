"""Is the record at a due timer entry's offset the message the timer knows? Checked before each delivery (issue 27).

The timer keeps a scheduled message as a CommitLog offset of a broker name (with its
message id, size and due time). After a failover the new master's log may hold other
bytes at that offset: it was a slave that had not copied that far and has written past
since, or its log was truncated to the controller's epoch history. A delivery by offset
alone would put whatever sits there in its topic, again or for the first time.

So the record read at the offset must be a scheduled record with the id and size the
timer sent. When it is not (or nothing can be read there), nothing is delivered from
there: the mismatch is logged and counted (`petrel_broker_scheduled_mismatched_total`,
by outcome), and the message is looked up by its id among this log's scheduled copies
(the one due when the entry says: a retried message has a copy per attempt). Found, it
is delivered from where it really is (`relocated`); its delivery's DEDUP token is the
copy's own, so a delivery of the same copy made before the failover is not stored twice.
Not found, it is `lost`: said in the log, the metric and a `delay_lost` event, never
silently; the timer drops the entry. An entry without an id (a first-format TimerLog's,
libs.timer.legacy_log) is checked by its size and topic only: a mismatch is lost, an
unreadable offset refused as before.

The check and the put are one request: a broker killed between them stored nothing, and
the timer, unanswered, asks again (the check is made again on whatever log then answers).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

from libs.broker_api.schemas import ExpectedRecord
from libs.codec import peek_head
from libs.delay import due_at
from libs.errors import CorruptRecord, OffsetOutOfRange
from libs.events import EventWriter
from libs.message import Prop, same_message_id
from libs.names import SCHEDULE_TOPICS
from libs.store.message_store import MessageStore

log = logging.getLogger(__name__)

RELOCATED = "relocated"
LOST = "lost"


@dataclass(frozen=True, slots=True)
class Located:
    """The scheduled record to deliver, and where it is (another offset than the entry's when `moved`)."""

    raw: bytes
    physical_offset: int
    moved: bool = False


@dataclass(frozen=True, slots=True)
class Lost:
    """The message expected is not at its offset nor anywhere in this log's schedule queues."""

    detail: str


class ScheduledChecks:
    def __init__(self, store: MessageStore, events: EventWriter, registry: CollectorRegistry) -> None:
        self.store = store
        self.events = events
        self.mismatched = Counter(
            "petrel_broker_scheduled_mismatched",
            "Due timer entries whose CommitLog offset held another message or none (after a failover): "
            "relocated (found by id, delivered from there) or lost",
            ["outcome"],
            registry=registry,
        )
        for outcome in (RELOCATED, LOST):
            self.mismatched.labels(outcome)

    def locate(self, offset: int, expected: ExpectedRecord | None) -> Located | Lost:
        """The record to deliver for the entry at `offset`; with nothing expected, raises PetrelError as `read` does."""
        if expected is None or (expected.message_id is None and expected.size is None):
            return Located(self.store.read(offset), offset)
        raw, mismatch = self._read(offset, expected)
        if mismatch is None:
            return Located(raw, offset)
        found = self._by_id(expected) if expected.message_id else None
        what = f"message {expected.message_id or '(no id: a first-format timer entry)'} due at {expected.due_ms}"
        if found is None:
            self.mismatched.labels(LOST).inc()
            detail = f"{mismatch}, and {what} is not in this broker's schedule queues: lost"
            log.error("timer delivery at %d: %s", offset, detail)
            self.events.emit(
                "delay_lost",
                message_id=expected.message_id,
                topic=None,
                deliver_at=expected.due_ms or 0,
                physical_offset=offset,
                reason=f"the timer's entry no longer matches this broker's log (a failover?): {detail}",
            )
            return Lost(detail)
        self.mismatched.labels(RELOCATED).inc()
        log.warning("timer delivery at %d: %s; %s found at %d and delivered from there", offset, mismatch, what, found)
        return Located(self.store.read(found), found, moved=True)

    def _read(self, offset: int, expected: ExpectedRecord) -> tuple[bytes, str | None]:
        """The record at `offset`, and why it is not the one expected (None: it is)."""
        try:
            raw = self.store.read(offset)
            head = peek_head(raw)
        except (OffsetOutOfRange, CorruptRecord) as exc:
            if expected.message_id is None:
                raise  # nothing to look it up by: refused, as ever (tried again, then dropped loudly)
            return b"", f"no record can be read at {offset} ({exc})"
        if head.topic not in SCHEDULE_TOPICS:
            return raw, f"the record at {offset} is in {head.topic}, not a schedule queue"
        if expected.size is not None and head.total_size != expected.size:
            return raw, f"the record at {offset} is {head.total_size} bytes, not {expected.size}"
        stored_id = head.properties.get(Prop.UNIQ_KEY)
        if expected.message_id is not None and not same_message_id(stored_id, expected.message_id):
            return raw, f"the record at {offset} is message {stored_id}, not {expected.message_id}"
        return raw, None

    def _by_id(self, expected: ExpectedRecord) -> int | None:
        """The offset of the message's newest scheduled copy due when expected (any, when no due time is given)."""
        assert expected.message_id is not None
        copies = self.store.query_id(expected.message_id, 0, 2**62, where=SCHEDULE_TOPICS.__contains__)
        for copy in copies:  # newest first
            if expected.due_ms is None or due_at(copy) == expected.due_ms:
                return copy.physical_offset
        return None
