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
from libs.broker_api.transactions import Outcome, TransactionState
from libs.broker_api.wire import CHECK_IMMUNITY, FIRST_STORED, OP_TAG
from libs.codec import decode_record, encode_record, peek_head
from libs.delay import is_scheduled
from libs.errors import FlushTimeout, InvalidMessage, PetrelError, TransactionAlreadyEnded, TransactionNotFound
from libs.events.writer import EventWriter
from libs.message import MessageRecord, Prop, SysFlag
from libs.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, is_public_topic
from libs.store.lookup import MAX_COPIES_SCANNED
from libs.store.message_store import MessageStore
from services.broker.ended_transactions import ENDED_KEPT, EndedTransactions
from services.broker.topics import TopicTable

HALF_PROPERTIES = frozenset(
    {Prop.REAL_TOPIC, Prop.REAL_QUEUE_ID, Prop.TRANSACTION_PREPARED, Prop.TRANSACTION_CHECK_TIMES, FIRST_STORED}
)


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


@dataclass(slots=True)
class _Pending:
    """A first end in a batch, until its records are stored; repeats of it in the batch share it."""

    request: TransactionEnd
    topic: str
    committed: MessageRecord | None
    real: MessageRecord | None
    """The committed copy to store, when there is none yet."""
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
        self.outcomes: EndedTransactions[Outcome] = EndedTransactions(self._recorded_outcome, ended_kept)
        """The newest in memory, older ones read back from the op queue (services.broker.ended_transactions)."""

    def load(self) -> int:
        """The outcomes recorded in the op queue (the newest kept in memory); how many."""
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
        parts: list[bytes] = []
        offset = 0
        while offset < len(body):
            head = peek_head(body, offset)
            raw = body[offset : offset + head.total_size]
            parts.append(self.to_half(raw) if head.properties.get(Prop.TRANSACTION_PREPARED) == "true" else raw)
            offset += head.total_size
        return b"".join(parts)

    def to_half(self, raw: bytes) -> bytes:
        """The producer's record as stored until it is ended: in the half topic, its destination in properties."""
        head = peek_head(raw)
        if head.total_size != len(raw):
            raise InvalidMessage("a half message is exactly one record")
        if is_scheduled(head.properties):
            raise InvalidMessage("a half message cannot be delayed")
        record = decode_record(raw, verify_crc=False)
        if not record.message_id or not record.properties.get(Prop.PRODUCER_GROUP):
            raise InvalidMessage(f"a half message carries {Prop.UNIQ_KEY} and {Prop.PRODUCER_GROUP}")
        properties = dict(record.properties) | {
            Prop.REAL_TOPIC: record.topic,
            Prop.REAL_QUEUE_ID: str(record.queue_id),
            Prop.TRANSACTION_PREPARED: "true",
            Prop.TRANSACTION_CHECK_TIMES: "0",
            FIRST_STORED: str(self.now_ms()),
        }
        sysflag = (record.sysflag & ~SysFlag.TRANSACTION_MASK) | SysFlag.TRANSACTION_PREPARED
        half = replace(record, topic=TRANS_HALF_TOPIC, queue_id=0, properties=properties, sysflag=sysflag)
        return encode_record(half)

    def transaction_id(self, message_id: str) -> str:
        """The public id: the broker that holds the half message, and its message id."""
        return f"{self.broker}:{message_id}"

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def latest_copy(self, message_id: str) -> MessageRecord | None:
        """The newest half copy (half topic or check-max topic) of a transaction."""
        return _latest_half(self.store.query_id(message_id, 0, 2**62, where=_HALF_TOPICS.__contains__))

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
        first = self.outcomes.get(message_id)
        if first is not None and first is not outcome:
            raise TransactionAlreadyEnded(
                f"transaction {self.transaction_id(message_id)} was already ended with {first.value}",
                outcome=first.value,
            )
        if message_id in pending:
            return pending[message_id]
        # Once: the index is the cost of an end. Past the message's retry and DLQ copies, which share its id.
        copies = self.store.query_id(message_id, 0, 2**62, limit=MAX_COPIES_SCANNED, where=_half_or_committed)
        half = _latest_half(copies)
        if half is None:
            raise TransactionNotFound(f"no half message {message_id} on this broker (or it is past retention)")
        topic = half.properties.get(Prop.REAL_TOPIC, "")
        committed = _committed_copy(copies, topic)
        if first is not None:
            return _ended(message_id, outcome, topic, committed, first=False)
        real = None
        if outcome is Outcome.COMMIT and committed is None:
            real = self._real_copy(half)
            parts.append(encode_record(real))
        parts.append(encode_record(_op_record(message_id, outcome, request.by)))
        self.outcomes[message_id] = outcome  # before the append's await: a racing end sees it
        pending[message_id] = _Pending(request, topic, committed, real, len(parts) - 1)
        return pending[message_id]

    async def _store_ends(self, ends: list[_Pending], parts: list[bytes]) -> None:
        """Append the ends' records at once; an end whose op record was not stored is undone, and fails."""
        try:
            stored = await self.store.put_reporting(b"".join(parts))
        except BaseException:
            for end in ends:
                self.outcomes.pop(end.request.message_id, None)
            raise
        for end in ends:
            message_id = end.request.message_id
            if end.op_index >= len(stored.stored):
                self.outcomes.pop(message_id, None)
                end.failure = stored.failure or PetrelError("the end was not stored")
                continue
            if end.real is not None:
                end.committed = replace(end.real, queue_offset=stored.stored[end.op_index - 1].queue_offset)
            if stored.not_durable is not None:  # stored all the same: the outcome stands, a repeat answers it
                end.failure = self._not_durable(end, stored.not_durable)
            committing = end.request.outcome is Outcome.COMMIT
            self.events.emit(
                "transaction_commit" if committing else "transaction_rollback",
                message_id=message_id,
                topic=end.topic,
                transaction_id=self.transaction_id(message_id),
                by=end.request.by,
            )

    def _not_durable(self, end: _Pending, timeout: FlushTimeout) -> FlushTimeout:
        outcome = end.request.outcome.value
        where = _ended(end.request.message_id, end.request.outcome, end.topic, end.committed, first=True)
        return FlushTimeout(
            f"{timeout.detail}; the {outcome} of transaction {self.transaction_id(end.request.message_id)} "
            "is recorded and stands (repeat it to learn when it is durable)",
            outcome=outcome,
            topic=where.topic,
            queue_id=where.queue_id,
            queue_offset=where.queue_offset,
        )

    def _real_copy(self, half: MessageRecord) -> MessageRecord:
        topic = half.properties[Prop.REAL_TOPIC]
        config = self.topics.get(topic)
        queue_id = int(half.properties.get(Prop.REAL_QUEUE_ID, "0")) % max(config.write_queues, 1)
        properties = {k: v for k, v in half.properties.items() if k not in HALF_PROPERTIES and k != CHECK_IMMUNITY}
        sysflag = (half.sysflag & ~SysFlag.TRANSACTION_MASK) | SysFlag.TRANSACTION_COMMIT
        return replace(
            half,
            topic=topic,
            queue_id=queue_id,
            properties=properties,
            sysflag=sysflag,
            queue_offset=0,
            physical_offset=0,
            store_timestamp=0,
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
        wanted = sorted(
            (self.transaction_id(m), record) for m, record in newest.items() if self.transaction_id(m) > after
        )
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
            transaction_id = self.transaction_id(message_id)
            self.events.emit("transaction_abandoned", message_id=message_id, topic=topic, transaction_id=transaction_id)
        return self._info(replace(renewed, store_timestamp=stored.stored[0].store_timestamp))


def _op_record(message_id: str, outcome: Outcome, by: str) -> MessageRecord:
    body = jsonutil.dumps({"message_id": message_id, "outcome": outcome.value, "by": by})
    return MessageRecord(topic=TRANS_OP_HALF_TOPIC, body=body, properties={Prop.TAGS: OP_TAG, Prop.KEYS: message_id})


def _latest_half(copies: list[MessageRecord]) -> MessageRecord | None:
    halves = [r for r in copies if r.topic in (TRANS_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC)]
    return max(halves, key=lambda r: r.physical_offset) if halves else None


def _committed_copy(copies: list[MessageRecord], topic: str) -> MessageRecord | None:
    found = [r for r in copies if r.topic == topic]
    return min(found, key=lambda r: r.physical_offset) if found else None


def _ended(message_id: str, outcome: Outcome, topic: str, committed: MessageRecord | None, *, first: bool) -> Ended:
    if committed is not None:
        return Ended(message_id, outcome, first, topic, committed.queue_id, committed.queue_offset)
    return Ended(message_id, outcome, first, topic, 0, None)


_HALF_TOPICS = frozenset({TRANS_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC})


def _half_or_committed(topic: str) -> bool:
    """A transaction's half copies, or its committed copy (in its real topic, a user topic)."""
    return topic in _HALF_TOPICS or is_public_topic(topic)
