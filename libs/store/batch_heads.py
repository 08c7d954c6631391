"""BatchHeads: what the store's append needs of each record of a batch, read in one pass.

A batch is records laid end to end (libs.codec). To store a record the store needs its
size, topic and queue id, its ConsumeQueue code (the tag's hash, or on the delay topics
the due time), its message id (UNIQ_KEY), its DEDUP token and the hashes of its index
keys: these are read here in one pass, into plain tuples (no RecordHead per record).

A record is accepted exactly when `peek_head` accepts it (its framing adds up, its topic
and properties are UTF-8); at the first that is not, `peek_head` names what is wrong and
the heads stop there. The properties are read with `decode_properties`: in CPython a
dict of every pair costs less than looking the four wanted names up one by one.

The index keys are hashed as IndexService.put_keys hashes them (`topic#key` for each key
in KEYS, `#UNIQ#id` for the message id; zlib.crc32 of the UTF-8 text), the CRC of a
topic's prefix kept (crc32 carries on from the CRC of what came before), as are tags' codes.
"""

from __future__ import annotations

import struct
import zlib
from functools import lru_cache
from typing import Final, NoReturn

from libs.codec import (
    BODY_LENGTH_AT,
    BODY_START,
    MAX_RECORD_SIZE,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    QUEUE_ID_AT,
    U16,
    Readable,
    decode_properties,
    peek_head,
)
from libs.delay import is_scheduled
from libs.errors import CorruptRecord
from libs.message import KEY_SEPARATOR, Prop, tags_code
from libs.names import SCHEDULE_TOPICS
from libs.store.index_file import UNIQUE_KEY_PREFIX

Head = tuple[int, tuple[str, int], int, str | None, str | None, list[int]]
"""(size, (topic, queue_id), ConsumeQueue code, message id, DEDUP token, index key hashes)"""

HALF: Final = 1
"""In BatchHeads.held: a transaction's half message (TRANSACTION_PREPARED) is among the records read."""
SCHEDULED: Final = 2
"""In BatchHeads.held: a record to deliver later (libs.delay.is_scheduled), not a half message nor after one, is
among them (a broker keeps half messages back first, and delays them when they are committed)."""

UNIQUE_KEY_CRC: Final = zlib.crc32(UNIQUE_KEY_PREFIX.encode())
_SLICEABLE: Final = (bytes, bytearray)
"""What a batch is read from without a copy: its slices decode."""
FIXED: Final = struct.Struct(">iI4xi92xi")
"""total_size, magic, queue_id, body_length: the fixed fields the store reads, in one unpack."""
assert FIXED.size == BODY_START
assert struct.calcsize(">iI4x") == QUEUE_ID_AT
assert struct.calcsize(">iI4xi92x") == BODY_LENGTH_AT


class BatchHeads:
    __slots__ = ("ends", "failure", "heads", "held", "queues", "source")

    def __init__(self, source: Readable) -> None:
        self.source = source
        """The batch read: its heads are of this object's bytes (the store reads a batch again when given others)."""
        self.heads: list[Head] = []
        """One per record, in order, up to the first that cannot be read."""
        self.ends: list[int] = []
        """Where each record ends in the batch."""
        self.queues: set[tuple[str, int]] = set()
        """The (topic, queue id) of every head."""
        self.failure: CorruptRecord | None = None
        """Why the record after the last head cannot be stored; None when every record was read."""
        self.held = 0
        """HALF and SCHEDULED, of the records read: what a broker keeps back before storing the batch as it is."""


def read_heads(batch: Readable) -> BatchHeads:
    """The heads of the batch's records, up to the first that cannot be read."""
    buf = batch if isinstance(batch, _SLICEABLE) else bytes(batch)
    found = BatchHeads(batch)
    offset, end = 0, len(buf)
    add_head, add_queue, add_end = found.heads.append, found.queues.add, found.ends.append
    held = 0
    try:
        while offset < end:
            head, kept = _head_at(buf, offset, end)
            add_head(head)
            add_queue(head[1])
            if kept and not (kept == SCHEDULED and held & HALF):  # a delay after a half message: the half's
                held |= kept
            offset += head[0]
            add_end(offset)
    except CorruptRecord as exc:
        found.failure = exc
    found.held = held
    return found


def _head_at(buf: bytes | bytearray, offset: int, end: int) -> tuple[Head, int]:
    """The head of the record at `offset`, and whether it is HALF, SCHEDULED or neither (0); CorruptRecord
    (peek_head's) if it cannot be read."""
    if end - offset < MIN_RECORD_SIZE:
        _refuse(buf, offset)
    total, magic, queue_id, body_length = FIXED.unpack_from(buf, offset)
    record_end = offset + total
    topic_at = offset + BODY_START + body_length
    if (
        magic != MESSAGE_MAGIC
        or not MIN_RECORD_SIZE <= total <= MAX_RECORD_SIZE
        or record_end > end
        or body_length < 0
        or topic_at + 2 > record_end
    ):
        _refuse(buf, offset)
    props_at = topic_at + 2 + U16.unpack_from(buf, topic_at)[0]
    if props_at + 2 > record_end or props_at + 2 + U16.unpack_from(buf, props_at)[0] != record_end:
        _refuse(buf, offset)
    try:
        topic = buf[topic_at + 2 : props_at].decode()
        properties = decode_properties(buf[props_at + 2 : record_end])
    except UnicodeDecodeError:
        _refuse(buf, offset)
    message_id = properties.get(Prop.UNIQ_KEY)
    keys = properties.get(Prop.KEYS)
    if not keys:
        hashes = []
    elif KEY_SEPARATOR in keys:
        hashes = [zlib.crc32(key.encode(), _key_prefix(topic)) for key in keys.split(KEY_SEPARATOR) if key]
    else:
        hashes = [zlib.crc32(keys.encode(), _key_prefix(topic))]
    if message_id:
        hashes.append(zlib.crc32(message_id.encode(), UNIQUE_KEY_CRC))
    tag = properties.get(Prop.TAGS)
    code = _due_code(properties) if topic in SCHEDULE_TOPICS else _tag_code(tag) if tag else 0
    half = properties.get(Prop.TRANSACTION_PREPARED) == "true"
    kept = HALF if half else SCHEDULED if is_scheduled(properties) else 0
    return (total, (topic, queue_id), code, message_id, properties.get(Prop.DEDUP), hashes), kept


@lru_cache(maxsize=1024)  # topics are at most 255 bytes
def _key_prefix(topic: str) -> int:
    """crc32 of `topic#`, which the hashes of the topic's keys carry on from (as put_keys hashes `topic#key`)."""
    return zlib.crc32(f"{topic}#".encode())


@lru_cache(maxsize=256)  # a tag may be long (up to the 32 KiB of properties): kept few
def _tag_code(tag: str) -> int:
    return tags_code(tag)


def _refuse(buf: Readable, offset: int) -> NoReturn:
    """Raise peek_head's CorruptRecord for the record at `offset`, which names what is wrong."""
    peek_head(buf, offset)
    raise CorruptRecord(offset, "the record's fields do not add up")  # not reached: peek_head checks the same


def _due_code(properties: dict[str, str]) -> int:
    """A delay topic's record's code, as message_store.unit_code computes it: its due time, else its tag's code."""
    due = properties.get(Prop.TIMER_DELIVER_MS)
    if due is not None and due.isascii() and due.isdigit():
        return int(due)
    return tags_code(properties.get(Prop.TAGS))
