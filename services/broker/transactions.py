"""Transactions on the broker: half messages, commit and rollback as op records, renewal for check-backs.

As RocketMQ (seed 000, 事务消息): a half message is stored in
`RMQ_SYS_TRANS_HALF_TOPIC` with its real topic and queue in properties, so no
consumer sees it. Ending it appends an op record (tag "d", JSON body naming the
message id and the outcome) to `RMQ_SYS_TRANS_OP_HALF_TOPIC`; a commit also
puts the message into its real topic with its message id, in the same append
as the op record. The outcomes are rebuilt from the op queue at start.

The check-back service (txcheck) scans the half queue; for each half copy it
checks it calls `checked`, and the broker appends a renewed copy with one more
check counted (so the scan can move on, as RocketMQ's putBackHalfMsgQueue), or
past `transaction_check_max` checks or `file_reserved_hours` moves it to
`TRANS_CHECK_MAX_TIME_TOPIC`, where it stays resolvable by an operator.

Ends come in batches (`end_batch`; a single end is a batch of one): the first
ends of a batch are stored in one append, so under SYNC_FLUSH one disk sync
covers them all before any is answered; each end is answered on its own.

Finding the half (issue 29): an end whose transaction id carries the offset of
the first half copy reads that record (services.broker.half_copies) and answers
from the outcomes in memory, when both are sure to be whole: the half was stored
after this broker read its op queue (`trusted_from`), and since then memory let
go of no outcome and no end of it failed halfway (`unsettled`). Otherwise, or
when the record there is not that half, the IndexFile finds its copies and the
op queue its outcome, as for an id without an offset.

Exactly once: an outcome is recorded before the append's await, so two ends
racing (in one batch or in two) see each other; a commit whose real copy is
already stored (an op record torn by a crash) does not store it again. An end
whose records are stored but whose disk sync timed out keeps its outcome (it is
answered flush-timeout): the records are in the CommitLog, so a later end the
other way is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from libs import jsonutil
from libs.broker_api.transaction_ids import ORIGIN_OFFSET, half_origin, id_of_half, transaction_id
from libs.broker_api.transactions import Outcome, TransactionState
from libs.broker_api.wire import FIRST_STORED, OP_TAG
from libs.codec import decode_record, encode_record
from libs.errors import (
    CorruptRecord,
    FlushTimeout,
    OffsetOutOfRange,
    PetrelError,
    TransactionAlreadyEnded,
    TransactionNotFound,
)
from libs.events.writer import EventWriter
from libs.message import MessageRecord, Prop
from libs.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from libs.store.message_store import MessageStore
from services.broker.ended_transactions import ENDED_KEPT, EndedTransactions
from services.broker.half_copies import (
    committed_copy,
    first_copy_at,
    half_batch,
    indexed_copies,
    latest_copy,
    latest_half,
    real_copy,
)
from services.broker.topics import TopicTable

Placed = tuple[int, int]
"""A committed copy's queue id and queue offset."""
ENDED = {Outcome.COMMIT: TransactionState.COMMITTED, Outcome.ROLLBACK: TransactionState.ROLLED_BACK}


@dataclass(frozen=True, slots=True)
class Ended:
    message_id: str
    outcome: Outcome
    first: bool
    topic: str
    queue_id: int
    queue_offset: int | None


@dataclass(frozen=True, slots=True)
class TransactionEnd:
    message_id: str
    outcome: Outcome
    by: str
    half_offset: int | None = None
    """Where the first half copy is, as the transaction id says (a hint, checked)."""


@dataclass(slots=True)
class _Pending:
    """A first end in a batch, until its records are stored; repeats of it in the batch share it."""

    request: TransactionEnd
    transaction_id: str
    topic: str
    committed: Placed | None
    """Where the committed copy is: known from the index for a repeat, else once stored."""
    storing_copy: bool
    """The end stores the committed copy (a commit, none stored yet), just before its op record."""
    op_index: int
    """Its op record's place among the batch's records."""
    failure: PetrelError | None = None

    def result(self, *, first: bool) -> Ended | PetrelError:
        if self.failure is not None:
            return self.failure
        request = self.request
        committed = self.committed if request.outcome is Outcome.COMMIT else None
        return _ended(request.message_id, request.outcome, self.topic, committed, first=first)


@dataclass(frozen=True, slots=True)
class TransactionInfo:
    message_id: str
    state: TransactionState
    topic: str
    producer_group: str
    check_count: int
    stored_at: int
    half_offset: int | None
    """The offset its transaction id carries (libs.broker_api.transaction_ids)."""


class Transactions:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicTable,
        events: EventWriter,
        *,
        broker: str,
        check_max: int,
        reserved_ms: int,
        clock: Callable[[], float] = time.time,
        ended_kept: int = ENDED_KEPT,
    ) -> None:
        self.store = store
        self.topics = topics
        self.events = events
        self.broker = broker
        self.check_max = check_max
        self.reserved_ms = reserved_ms
        self.clock = clock
        self.outcomes: EndedTransactions[Outcome] = EndedTransactions(
            self._recorded_outcome, ended_kept, self._outcomes_evicted
        )
        """The newest in memory, older ones read back from the op queue (services.broker.ended_transactions)."""
        self.trusted_from = 2**63
        """Every end of a half stored from this CommitLog offset on is in `outcomes`' memory (set by `load`)."""
        self.unsettled: set[str] = set()
        """Transactions whose end failed after its append began: their records may be stored, or part of them."""

    def load(self) -> int:
        """The outcomes recorded in the op queue (the newest kept in memory); how many."""
        self.trusted_from = self.store.commitlog.write_offset
        low, high = self.store.queue_offsets(TRANS_OP_HALF_TOPIC, 0)
        offset = low
        count = 0
        while offset < high:
            result = self.store.pull(TRANS_OP_HALF_TOPIC, 0, offset, 256)
            for raw in result.records:
                record = decode_record(raw)
                op = jsonutil.loads(record.body)
                if op["message_id"] in record.keys:
                    self.outcomes[op["message_id"]] = Outcome(op["outcome"])
                else:
                    self.outcomes.keep_for_ever(op["message_id"], Outcome(op["outcome"]))
                count += 1
            offset = result.next_offset
        return count

    def _outcomes_evicted(self) -> None:
        """Memory let go of outcomes: halves stored before now may have been ended without memory knowing."""
        self.trusted_from = max(self.trusted_from, self.store.commitlog.write_offset)

    def _recorded_outcome(self, message_id: str) -> Outcome | None:
        """The first outcome the op queue recorded for a transaction (found by its key), if any."""
        ops = self.store.query_key(TRANS_OP_HALF_TOPIC, message_id, 0, 2**62)
        for record in sorted(ops, key=lambda r: r.physical_offset):
            op = jsonutil.loads(record.body)
            if op.get("message_id") == message_id:
                return Outcome(op["outcome"])
        return None

    # ---- half messages -----------------------------------------------------------------------

    def to_half_batch(self, body: bytes) -> bytes:
        """A put's records, each marked TRAN_MSG=true moved to the half topic (the others as they are)."""
        return half_batch(body, self.now_ms())

    def transaction_id(self, message_id: str, half_offset: int | None = None) -> str:
        """The public id: the broker that holds the half message, its message id, where its first copy is."""
        return transaction_id(self.broker, message_id, half_offset)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def latest_copy(self, message_id: str) -> MessageRecord | None:
        """The newest half copy (half topic or check-max topic) of a transaction."""
        return latest_copy(self.store, message_id)

    # ---- ending --------------------------------------------------------------------------------

    async def end(self, message_id: str, outcome: Outcome, by: str) -> Ended:
        (result,) = await self.end_batch([TransactionEnd(message_id, outcome, by)])
        if isinstance(result, PetrelError):
            raise result
        return result

    async def end_batch(self, requests: list[TransactionEnd]) -> list[Ended | PetrelError]:
        """End each transaction asked; the first ends of the batch are stored in one append (one sync)."""
        prepared: list[Ended | PetrelError | _Pending] = []
        pending: dict[str, _Pending] = {}
        parts: list[bytes] = []
        for request in requests:
            try:
                prepared.append(self._prepare_end(request, pending, parts))
            except PetrelError as exc:
                prepared.append(exc)
        if pending:
            await self._store_ends(list(pending.values()), parts)
        results: list[Ended | PetrelError] = []
        for request, result in zip(requests, prepared, strict=True):
            results.append(result.result(first=result.request is request) if isinstance(result, _Pending) else result)
        return results

    def _prepare_end(
        self, request: TransactionEnd, pending: dict[str, _Pending], parts: list[bytes]
    ) -> Ended | _Pending:
        """What an end answers now (a repeat, a conflict), or its records added to `parts` to be stored."""
        message_id, outcome = request.message_id, request.outcome
        half, stored = self._first_copy(request) or (None, None)
        first = self.outcomes.held(message_id) if half is not None else self.outcomes.get(message_id)
        if first is not None and first is not outcome:
            raise TransactionAlreadyEnded(
                f"transaction {self.transaction_id(message_id, request.half_offset)} was already ended with "
                f"{first.value}",
                outcome=first.value,
            )
        if message_id in pending:
            return pending[message_id]
        committed = None
        if half is None or first is not None:  # a repeat answers where the committed copy is: the index knows
            copies = indexed_copies(self.store, message_id)
            half, stored = latest_half(copies), None
            if half is None:
                raise TransactionNotFound(f"no half message {message_id} on this broker (or it is past retention)")
            copy = committed_copy(copies, half.properties.get(Prop.REAL_TOPIC, ""))
            committed = None if copy is None else (copy.queue_id, copy.queue_offset)
        topic = half.properties.get(Prop.REAL_TOPIC, "")
        if first is not None:
            return _ended(message_id, outcome, topic, committed, first=False)
        storing_copy = outcome is Outcome.COMMIT and committed is None
        if storing_copy:
            stored = stored or self._stored(half)
            parts.append(real_copy(half, stored, self.topics.get(topic).write_queues))
        parts.append(encode_record(_op_record(message_id, outcome, request.by)))
        self.outcomes[message_id] = outcome  # before the append's await: a racing end sees it
        ended = _Pending(request, id_of_half(self.broker, half), topic, committed, storing_copy, len(parts) - 1)
        pending[message_id] = ended
        return ended

    def _stored(self, half: MessageRecord) -> bytes:
        """The half copy's bytes as stored (found through the index a moment ago: retention may have just taken it)."""
        try:
            return self.store.read(half.physical_offset)
        except (CorruptRecord, OffsetOutOfRange) as exc:
            raise TransactionNotFound(
                f"no half message {half.message_id} on this broker (or it is past retention)"
            ) from exc

    def _first_copy(self, request: TransactionEnd) -> tuple[MessageRecord, bytes] | None:
        """The first half copy and its bytes, read where the id says, when memory alone knows whether it was ended."""
        offset = request.half_offset
        if offset is None or offset < self.trusted_from or request.message_id in self.unsettled:
            return None
        return first_copy_at(self.store, offset, request.message_id)

    async def _store_ends(self, ends: list[_Pending], parts: list[bytes]) -> None:
        """Append the ends' records at once; an end whose op record was not stored is undone, and fails."""
        try:
            stored = await self.store.put_reporting(b"".join(parts))
        except BaseException:
            for end in ends:
                self.outcomes.pop(end.request.message_id, None)
                self.unsettled.add(end.request.message_id)
            raise
        for end in ends:
            message_id = end.request.message_id
            if end.op_index >= len(stored.stored):
                self.outcomes.pop(message_id, None)
                self.unsettled.add(message_id)
                end.failure = stored.failure or PetrelError("the end was not stored")
                continue
            if end.storing_copy:
                copy = stored.stored[end.op_index - 1]
                end.committed = (copy.queue_id, copy.queue_offset)
            if stored.not_durable is not None:  # stored all the same: the outcome stands, a repeat answers it
                end.failure = self._not_durable(end, stored.not_durable)
            committing = end.request.outcome is Outcome.COMMIT
            self.events.emit(
                "transaction_commit" if committing else "transaction_rollback",
                message_id=message_id,
                topic=end.topic,
                transaction_id=end.transaction_id,
                by=end.request.by,
            )

    def _not_durable(self, end: _Pending, timeout: FlushTimeout) -> FlushTimeout:
        outcome = end.request.outcome.value
        where = _ended(end.request.message_id, end.request.outcome, end.topic, end.committed, first=True)
        return FlushTimeout(
            f"{timeout.detail}; the {outcome} of transaction {end.transaction_id} "
            "is recorded and stands (repeat it to learn when it is durable)",
            outcome=outcome,
            topic=where.topic,
            queue_id=where.queue_id,
            queue_offset=where.queue_offset,
        )

    # ---- state and check-backs -----------------------------------------------------------------

    def info(self, message_id: str) -> TransactionInfo:
        half = self.latest_copy(message_id)
        if half is None:
            raise TransactionNotFound(f"no half message {message_id} on this broker (or it is past retention)")
        return self._info(half)

    def _info(self, half: MessageRecord) -> TransactionInfo:
        message_id = half.message_id or ""
        outcome = self.outcomes.get(message_id)
        if outcome is not None:
            state = ENDED[outcome]
        elif half.topic == TRANS_CHECK_MAX_TIME_TOPIC:
            state = TransactionState.ABANDONED
        else:
            state = TransactionState.OPEN
        return TransactionInfo(
            message_id,
            state,
            half.properties.get(Prop.REAL_TOPIC, ""),
            half.properties.get(Prop.PRODUCER_GROUP, ""),
            int(half.properties.get(Prop.TRANSACTION_CHECK_TIMES, "0")),
            int(half.properties.get(FIRST_STORED, str(half.store_timestamp))),
            half_origin(half),
        )

    def listed(self, state: TransactionState, max_count: int, after: str = "") -> list[TransactionInfo]:
        """Open or abandoned transactions whose id sorts after `after`, the first `max_count` by id.

        Open: every half message not ended whose newest copy is still in the half topic (a
        renewed copy supersedes the one it renews; an abandoned one is in the check-max topic).
        A scan of the topic's queue, as the check-back service's: it costs what the queue holds.
        """
        topic = TRANS_HALF_TOPIC if state is TransactionState.OPEN else TRANS_CHECK_MAX_TIME_TOPIC
        low, high = self.store.queue_offsets(topic, 0)
        newest: dict[str, MessageRecord] = {}
        offset = low
        while offset < high:
            result = self.store.pull(topic, 0, offset, 256)
            for raw in result.records:
                record = decode_record(raw)
                if record.message_id and record.message_id not in self.outcomes:
                    newest[record.message_id] = record
            offset = result.next_offset
        if state is TransactionState.OPEN:
            abandoned = self.listed(TransactionState.ABANDONED, len(newest) + 1) if newest else []
            for info in abandoned:
                newest.pop(info.message_id, None)
        named = ((id_of_half(self.broker, record), record) for record in newest.values())
        wanted = sorted(((name, record) for name, record in named if name > after), key=lambda pair: pair[0])
        return [self._info(record) for _, record in wanted[:max_count]]

    async def checked(self, message_id: str, physical_offset: int, *, defer: bool = False) -> TransactionInfo:
        """A check of this half copy was dispatched: renew it with one more check counted, or abandon it.

        `defer`: the copy is still within its check immunity; renew it without counting a check,
        so the scan can move past it (as RocketMQ puts an immune half message back).
        """
        scanned = decode_record(self.store.read(physical_offset))
        if scanned.message_id != message_id or scanned.topic != TRANS_HALF_TOPIC:
            raise TransactionNotFound(f"the record at {physical_offset} is not a half copy of {message_id}")
        latest = self.latest_copy(message_id)
        if message_id in self.outcomes or latest is None or latest.physical_offset != scanned.physical_offset:
            return self._info(latest or scanned)  # ended, or already renewed by an earlier scan
        count = int(scanned.properties.get(Prop.TRANSACTION_CHECK_TIMES, "0")) + (0 if defer else 1)
        first = int(scanned.properties.get(FIRST_STORED, str(scanned.store_timestamp)))
        abandon = (count >= self.check_max and not defer) or self.now_ms() - first >= self.reserved_ms
        properties = dict(scanned.properties) | {Prop.TRANSACTION_CHECK_TIMES: str(count)}
        origin = half_origin(scanned)
        if origin is not None:  # the renewed copy names the first, whose offset the transaction id carries
            properties[ORIGIN_OFFSET] = str(origin)
        renewed = replace(
            scanned,
            topic=TRANS_CHECK_MAX_TIME_TOPIC if abandon else TRANS_HALF_TOPIC,
            queue_id=0,
            properties=properties,
            queue_offset=0,
            physical_offset=0,
            store_timestamp=0,
        )
        stored = await self.store.put(encode_record(renewed))
        if stored.failure is not None:
            raise stored.failure
        if abandon:
            topic = properties.get(Prop.REAL_TOPIC, "")
            transaction_id = id_of_half(self.broker, scanned)
            self.events.emit("transaction_abandoned", message_id=message_id, topic=topic, transaction_id=transaction_id)
        return self._info(replace(renewed, store_timestamp=stored.stored[0].store_timestamp))


def _op_record(message_id: str, outcome: Outcome, by: str) -> MessageRecord:
    body = jsonutil.dumps({"message_id": message_id, "outcome": outcome.value, "by": by})
    return MessageRecord(topic=TRANS_OP_HALF_TOPIC, body=body, properties={Prop.TAGS: OP_TAG, Prop.KEYS: message_id})


def _ended(message_id: str, outcome: Outcome, topic: str, committed: Placed | None, *, first: bool) -> Ended:
    if committed is not None:
        return Ended(message_id, outcome, first, topic, *committed)
    return Ended(message_id, outcome, first, topic, 0, None)
