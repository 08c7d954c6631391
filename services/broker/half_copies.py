"""A transaction's copies in the CommitLog: its half copies (the first, renewed ones, an abandoned one) and its
committed copy; how a producer's record becomes the first and a half copy the committed one, and how they are
found, by one read at the offset the transaction id carries or through the IndexFile.

The read (issue 29, RocketMQ's end by commitLogOffset, seed 004 4.13) finds the
first half copy only: the record at the offset must be a whole record stored
there, of the half topic, with the transaction's message id, and be a first copy
(ORIGIN_OFFSET empty). Retention may have deleted its segment, a truncation may
have put another record there, an id may be forged: then it answers None, and
the index answers instead.
"""

from __future__ import annotations

from libs.broker_api.transaction_ids import ORIGIN_OFFSET
from libs.broker_api.wire import CHECK_IMMUNITY, FIRST_STORED
from libs.codec import RecordHead, decode_record, peek_head, peek_sysflag, recast_record
from libs.delay import is_scheduled
from libs.errors import CorruptRecord, InvalidMessage, OffsetOutOfRange
from libs.message import MessageRecord, Prop, SysFlag
from libs.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, is_public_topic
from libs.store.lookup import MAX_COPIES_SCANNED
from libs.store.message_store import MessageStore

HALF_TOPICS = frozenset({TRANS_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC})
HALF_PROPERTIES = frozenset(
    {
        Prop.REAL_TOPIC,
        Prop.REAL_QUEUE_ID,
        Prop.TRANSACTION_PREPARED,
        Prop.TRANSACTION_CHECK_TIMES,
        FIRST_STORED,
        ORIGIN_OFFSET,
        CHECK_IMMUNITY,
    }
)
"""What a half copy carries that its committed copy does not."""


def half_batch(body: bytes, now_ms: int) -> bytes:
    """A put's records, each marked TRAN_MSG=true moved to the half topic (the others as they are).

    Each record's head is read once (its framing was checked by the put's destination check), and its half copy
    is recast from its bytes (libs.codec.recast_record): its body is never decoded."""
    parts: list[bytes] = []
    offset = 0
    while offset < len(body):
        head = peek_head(body, offset)
        size = head.total_size
        prepared = head.properties.get(Prop.TRANSACTION_PREPARED) == "true"
        parts.append(first_half(body, offset, head, now_ms) if prepared else body[offset : offset + size])
        offset += size
    return parts[0] if len(parts) == 1 else b"".join(parts)


def first_half(body: bytes, offset: int, head: RecordHead, now_ms: int) -> bytes:
    """The producer's record at `offset` (`head`, its head), encoded as stored until it is ended: in the half
    topic, its destination in properties."""
    properties = head.properties
    if is_scheduled(properties):
        raise InvalidMessage("a half message cannot be delayed")
    if not properties.get(Prop.UNIQ_KEY) or not properties.get(Prop.PRODUCER_GROUP):
        raise InvalidMessage(f"a half message carries {Prop.UNIQ_KEY} and {Prop.PRODUCER_GROUP}")
    half_properties = dict(properties)
    half_properties.update(
        {
            Prop.REAL_TOPIC: head.topic,
            Prop.REAL_QUEUE_ID: str(head.queue_id),
            Prop.TRANSACTION_PREPARED: "true",
            Prop.TRANSACTION_CHECK_TIMES: "0",
            FIRST_STORED: str(now_ms),
            ORIGIN_OFFSET: "",
        }
    )
    sysflag = (peek_sysflag(body, offset) & ~SysFlag.TRANSACTION_MASK) | SysFlag.TRANSACTION_PREPARED
    return recast_record(body, offset, TRANS_HALF_TOPIC, 0, half_properties, sysflag)


def real_copy(half: MessageRecord, stored: bytes, write_queues: int) -> bytes:
    """The committed copy of a half copy (`stored`: its bytes as stored), encoded, for its real topic of
    `write_queues` queues."""
    queue_id = int(half.properties.get(Prop.REAL_QUEUE_ID, "0")) % max(write_queues, 1)
    properties = {k: v for k, v in half.properties.items() if k not in HALF_PROPERTIES}
    sysflag = (half.sysflag & ~SysFlag.TRANSACTION_MASK) | SysFlag.TRANSACTION_COMMIT
    return recast_record(stored, 0, half.properties[Prop.REAL_TOPIC], queue_id, properties, sysflag)


def first_copy_at(store: MessageStore, offset: int, message_id: str) -> tuple[MessageRecord, bytes] | None:
    """The transaction's first half copy and its stored bytes, if it is the record at `offset`."""
    try:
        stored = store.read(offset)
        record = decode_record(stored)
    except (CorruptRecord, OffsetOutOfRange):
        return None
    if (
        record.physical_offset != offset
        or record.message_id != message_id
        or record.topic != TRANS_HALF_TOPIC
        or record.properties.get(ORIGIN_OFFSET) != ""
    ):
        return None
    return record, stored


def indexed_copies(store: MessageStore, message_id: str) -> list[MessageRecord]:
    """The transaction's half and committed copies, through the index, past its retry and DLQ copies."""
    return store.query_id(message_id, 0, 2**62, limit=MAX_COPIES_SCANNED, where=_half_or_committed)


def latest_copy(store: MessageStore, message_id: str) -> MessageRecord | None:
    """The newest half copy (half topic or check-max topic) of a transaction."""
    return latest_half(store.query_id(message_id, 0, 2**62, where=HALF_TOPICS.__contains__))


def latest_half(copies: list[MessageRecord]) -> MessageRecord | None:
    halves = [r for r in copies if r.topic in HALF_TOPICS]
    return max(halves, key=lambda r: r.physical_offset) if halves else None


def committed_copy(copies: list[MessageRecord], topic: str) -> MessageRecord | None:
    found = [r for r in copies if r.topic == topic]
    return min(found, key=lambda r: r.physical_offset) if found else None


def _half_or_committed(topic: str) -> bool:
    """A transaction's half copies, or its committed copy (in its real topic, a user topic)."""
    return topic in HALF_TOPICS or is_public_topic(topic)
