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
in KEYS, `#UNIQ#id` for the message id; zlib.crc32 of the UTF-8 text), the topic's
prefix once per topic: crc32 carries on from the CRC of what came before.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
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
from libs.errors import CorruptRecord
from libs.message import KEY_SEPARATOR, Prop, tags_code
from libs.names import SCHEDULE_TOPICS
from libs.store.index_file import UNIQUE_KEY_PREFIX

Head = tuple[int, tuple[str, int], int, str | None, str | None, list[int]]
"""(size, (topic, queue_id), ConsumeQueue code, message id, DEDUP token, index key hashes)"""

UNIQUE_KEY_CRC: Final = zlib.crc32(UNIQUE_KEY_PREFIX.encode())
FIXED: Final = struct.Struct(">iI4xi92xi")
"""total_size, magic, queue_id, body_length: the fixed fields the store reads, in one unpack."""
assert FIXED.size == BODY_START
assert struct.calcsize(">iI4x") == QUEUE_ID_AT
assert struct.calcsize(">iI4xi92x") == BODY_LENGTH_AT


@dataclass(slots=True)
class BatchHeads:
    heads: list[Head] = field(default_factory=list)
    """One per record, in order, up to the first that cannot be read."""
    ends: list[int] = field(default_factory=list)
    """Where each record ends in the batch."""
    queues: set[tuple[str, int]] = field(default_factory=set)
    """The (topic, queue id) of every head."""
    failure: CorruptRecord | None = None
    """Why the record after the last head cannot be stored; None when every record was read."""


def read_heads(batch: Readable) -> BatchHeads:
    """The heads of the batch's records, up to the first that cannot be read."""
    buf = batch if isinstance(batch, bytes | bytearray) else bytes(batch)
    found = BatchHeads()
    seen = _Seen()
    offset, end = 0, len(buf)
    add_head, add_queue, add_end = found.heads.append, found.queues.add, found.ends.append
    try:
        while offset < end:
            head = _head_at(buf, offset, end, seen)
            add_head(head)
            add_queue(head[1])
            offset += head[0]
            add_end(offset)
    except CorruptRecord as exc:
        found.failure = exc
    return found


@dataclass(slots=True)
class _Seen:
    """What a batch's records repeat, worked out once per batch."""

    prefixes: dict[str, int] = field(default_factory=dict)
    """topic -> crc32 of `topic#`, which its keys' hashes carry on from"""
    codes: dict[str, int] = field(default_factory=dict)
    """tag -> its code"""


def _head_at(buf: bytes | bytearray, offset: int, end: int, seen: _Seen) -> Head:
    """The head of the record at `offset`; CorruptRecord (peek_head's) if it cannot be read."""
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
    hashes = _key_hashes(topic, properties.get(Prop.KEYS), message_id, seen.prefixes)
    tag = properties.get(Prop.TAGS)
    if topic in SCHEDULE_TOPICS:
        code = _due_code(properties)
    elif not tag:
        code = 0
    elif (code := seen.codes.get(tag, -1)) < 0:
        code = seen.codes[tag] = tags_code(tag)
    return total, (topic, queue_id), code, message_id, properties.get(Prop.DEDUP), hashes


def _refuse(buf: Readable, offset: int) -> NoReturn:
    """Raise peek_head's CorruptRecord for the record at `offset`, which names what is wrong."""
    peek_head(buf, offset)
    raise CorruptRecord(offset, "the record's fields do not add up")  # not reached: peek_head checks the same


def _key_hashes(topic: str, keys: str | None, message_id: str | None, prefixes: dict[str, int]) -> list[int]:
    """The hashes of `topic#key` for each key, then of `#UNIQ#id`, as IndexService.put_keys hashes them."""
    prefix = prefixes.get(topic)
    if prefix is None:
        prefix = prefixes[topic] = zlib.crc32(f"{topic}#".encode())
    if not keys:
        hashes = []
    elif KEY_SEPARATOR in keys:
        hashes = [zlib.crc32(key.encode(), prefix) for key in keys.split(KEY_SEPARATOR) if key]
    else:
        hashes = [zlib.crc32(keys.encode(), prefix)]
    if message_id:
        hashes.append(zlib.crc32(message_id.encode(), UNIQUE_KEY_CRC))
    return hashes


def _due_code(properties: dict[str, str]) -> int:
    """A delay topic's record's code, as message_store.unit_code computes it: its due time, else its tag's code."""
    due = properties.get(Prop.TIMER_DELIVER_MS)
    if due is not None and due.isdigit():
        return int(due)
    return tags_code(properties.get(Prop.TAGS))
