"""MessageLookup: finding stored messages by key or message id through the IndexFile.

Index entries hold only key hashes, and may outlive a truncated tail: every hit is
read back from the CommitLog and checked before it is answered. Two kinds of look-up:

- the store's queries (`query_key`, `query_id`): records, newest first, decoded;
  a public query by key is bounded and sliced (`query_key_in_slices`, see key_walk.py);
- the DEDUP look-up of `append` (`stored_copy`): the copy a put with the same message id,
  topic and token stored before, answered as that put's PutResult; only heads are read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from libs.codec import decode_record, peek_head, peek_offsets, peek_topic
from libs.errors import CorruptRecord, OffsetOutOfRange
from libs.message import MessageRecord, Prop, id_time
from libs.store.budget import ScanBudget
from libs.store.commitlog import CommitLog
from libs.store.index_service import IndexService
from libs.store.results import KeyQueryResult, PutResult

DEDUP_SKEW_MS = 600_000
"""A message id carries its gateway's clock (ms); a copy is looked for from that time minus this much on."""
MAX_COPIES_SCANNED = 1024
"""A message id's copies read back by a query_id looking for some of them (a retry, a DLQ copy ... each counts)."""
STEPS_BETWEEN_CLOCKS = 512
"""Index entries a sliced query reads between two looks at the clock (well under a millisecond)."""


class IndexedLog(Protocol):
    """What a look-up reads (of libs.store.message_store.MessageStore): the index that finds, the log read back."""

    @property
    def index(self) -> IndexService: ...
    @property
    def commitlog(self) -> CommitLog: ...


class MessageLookup:
    def __init__(self, store: IndexedLog) -> None:
        self.store = store

    # ---- queries -------------------------------------------------------------------------

    def query_key(self, topic: str, key: str, begin: int, end: int, limit: int = 32) -> list[MessageRecord]:
        offsets = self.store.index.query(topic, key, begin, end, limit * 2)
        return self._verified(offsets, lambda r: r.topic == topic and key in r.keys, begin, end, limit)

    async def query_key_in_slices(
        self, topic: str, key: str, begin: int, end: int, limit: int, budget: ScanBudget
    ) -> KeyQueryResult:
        """As `query_key`, reading at most `budget.max_steps` index entries, and letting the event loop run
        between slices; past the bound, what was found so far, `truncated`."""
        walk = self.store.index.walk_key(topic, key, begin, end, limit * 2)
        spending = budget.start()
        while not walk.done and not spending.exhausted:
            spending.spend(walk.step(min(spending.steps_left, STEPS_BETWEEN_CLOCKS)))
            await spending.turn()
        records = self._verified(walk.found, lambda r: r.topic == topic and key in r.keys, begin, end, limit)
        return KeyQueryResult(records, truncated=not walk.done)

    def query_id(
        self, message_id: str, begin: int, end: int, limit: int = 32, where: Callable[[str], bool] | None = None
    ) -> list[MessageRecord]:
        """Records with this id, newest first; with `where`, only those of a topic it accepts.

        A retried message has a copy per attempt, the newest first in the index: `where`
        looks past them (up to MAX_COPIES_SCANNED) for the copies it wants, e.g. the original.
        """
        scanned = limit * 2 if where is None else MAX_COPIES_SCANNED
        offsets = self.store.index.query_unique(message_id, begin, end, scanned)
        return self._verified(
            offsets, lambda r: r.message_id == message_id and (where is None or where(r.topic)), begin, end, limit
        )

    def _verified(
        self, offsets: list[int], wanted: Callable[[MessageRecord], bool], begin: int, end: int, limit: int
    ) -> list[MessageRecord]:
        commitlog = self.store.commitlog
        found: dict[int, MessageRecord] = {}
        for physical in offsets:
            if physical in found or not commitlog.min_offset <= physical < commitlog.write_offset:
                continue
            try:
                record = decode_record(commitlog.read_record(physical))
            except (CorruptRecord, OffsetOutOfRange):
                continue
            if record.physical_offset == physical and begin <= record.store_timestamp <= end and wanted(record):
                found[physical] = record
        return sorted(found.values(), key=lambda r: r.physical_offset, reverse=True)[:limit]

    # ---- de-duplication ------------------------------------------------------------------

    def stored_copy(self, topic: str, message_id: str | None, token: str | None) -> PutResult | None:
        """The copy stored before of a record of `topic` with this message id (UNIQ_KEY) and DEDUP token, if any.

        DEDUP holds a token: a copy matches when it has the same message id, topic and token.
        The gateway marks the records of a send that has an Idempotency-Key "true" and re-sends
        them with the same message id; the broker's own re-puts (timer deliveries, retry and
        dead-letter copies) carry a token per delivery or attempt. The IndexFile's UNIQ_KEY
        entries find the copies, newest first; only their heads are read. Looked up by `append`
        in the same synchronous step as the append, so two racing puts cannot both store.
        """
        if not message_id or not token:
            return None
        born = max(0, id_time(message_id) - DEDUP_SKEW_MS)
        for physical in self.store.index.query_unique(message_id, born, 2**62, MAX_COPIES_SCANNED):
            copy = self._copy_at(physical, message_id, topic.encode(), token)
            if copy is not None:
                return copy
        return None

    def _copy_at(self, physical: int, message_id: str, topic: bytes, token: str) -> PutResult | None:
        """The record at `physical` as a duplicate's answer, if it is the copy looked for (index hits are hashes).

        The topic is compared first, undecoded: most copies of a message (its scheduled,
        retry and dead-letter copies) are in other topics, and their properties are not read.
        """
        commitlog = self.store.commitlog
        if not commitlog.min_offset <= physical < commitlog.write_offset:
            return None
        segment = commitlog.segment_at(physical)
        position = physical - segment.start_offset
        try:
            if peek_topic(segment.map, position) != topic:
                return None
            stored = peek_head(segment.map, position)
        except CorruptRecord:
            return None
        properties = stored.properties
        if properties.get(Prop.UNIQ_KEY) != message_id or properties.get(Prop.DEDUP) != token:
            return None
        queue_offset, stamped_physical = peek_offsets(segment.map, position)
        if stamped_physical != physical:
            return None
        due = properties.get(Prop.TIMER_DELIVER_MS, "")
        return PutResult(
            stored.topic,
            stored.queue_id,
            queue_offset,
            physical,
            stored.total_size,
            commitlog.stored_at(physical),
            message_id,
            duplicate=True,
            due_at=int(due) if due.isdigit() else None,
        )
