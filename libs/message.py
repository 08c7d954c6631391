"""The message model shared by every Petrel service.

A `MessageRecord` is one message as the broker stores it: what the producer sent
(topic, body, flag, properties) plus what the broker stamps on it (queue offset,
CommitLog offset, store time and host). Well-known property names and system
flags follow RocketMQ's, so the seeds' descriptions apply unchanged.
"""

from __future__ import annotations

import itertools
import os
import re
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Final


class Prop:
    """Names of the system properties a record may carry (RocketMQ's spelling)."""

    TAGS: Final = "TAGS"
    KEYS: Final = "KEYS"
    UNIQ_KEY: Final = "UNIQ_KEY"
    DELAY_LEVEL: Final = "DELAY"
    TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
    TIMER_ROLL_TIMES: Final = "TIMER_ROLL_TIMES"
    REAL_TOPIC: Final = "REAL_TOPIC"
    REAL_QUEUE_ID: Final = "REAL_QID"
    TRANSACTION_PREPARED: Final = "TRAN_MSG"
    PRODUCER_GROUP: Final = "PGROUP"
    TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    TRANSACTION_FIRST_STORED: Final = "TRAN_FIRST_STORED_MS"
    TRANSACTION_ORIGIN: Final = "TRAN_ORIGIN_OFFSET"
    """A half copy's: the CommitLog offset of its transaction's first half copy ("" on that copy), which the
    transaction id carries (libs.broker_api.transaction_ids)."""
    MESSAGE_GROUP: Final = "SHARDING_KEY"
    RETRY_TOPIC: Final = "RETRY_TOPIC"
    ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
    DLQ_REASON: Final = "DLQ_REASON"
    DEDUP: Final = "DEDUP"
    """A de-duplication token: a put of a record that carries one is answered with the copy of the same
    message id, topic and token stored before, if any, instead of storing another. "true" on a gateway
    send with an Idempotency-Key; the broker's re-puts (timer deliveries, retry and dead-letter
    copies) carry a token per delivery or attempt."""


KEY_SEPARATOR: Final = " "
KEY_PATTERN: Final = f"^[^{KEY_SEPARATOR}]+$"
"""A key a message is sent with: non-empty, without the separator of the KEYS property."""
"""Keys are kept in one property, separated by a space (as RocketMQ does)."""


def tags_code(tag: str | None) -> int:
    """The tag's hash code kept in ConsumeQueue units (0 for no tag).

    CRC32 of the UTF-8 tag: stable across processes and machines (unlike
    Python's hash), cheap, and collisions are harmless because a filter that
    matches the code rechecks the tag string.
    """
    return zlib.crc32(tag.encode()) if tag else 0


class SysFlag:
    """Bits of a record's `sysflag` field."""

    COMPRESSED: Final = 0x1
    MULTI_TAGS: Final = 0x2
    TRANSACTION_NOT_TYPE: Final = 0x0
    TRANSACTION_PREPARED: Final = 0x1 << 2
    TRANSACTION_COMMIT: Final = 0x2 << 2
    TRANSACTION_ROLLBACK: Final = 0x3 << 2
    TRANSACTION_MASK: Final = 0x3 << 2
    BINARY_BODY: Final = 0x1 << 8
    """The producer sent body_base64: consumers get body_base64 back."""


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One message with everything the CommitLog keeps about it."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: Mapping[str, str] = field(default_factory=dict)
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: str = "0.0.0.0:0"
    store_timestamp: int = 0
    store_host: str = "0.0.0.0:0"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    queue_offset: int = 0
    physical_offset: int = 0

    @property
    def message_id(self) -> str | None:
        return self.properties.get(Prop.UNIQ_KEY)

    @property
    def tag(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(Prop.KEYS, "")
        return [k for k in raw.split(KEY_SEPARATOR) if k]

    @property
    def user_properties(self) -> dict[str, str]:
        return {k: v for k, v in self.properties.items() if k not in SYSTEM_PROPERTIES}

    @property
    def binary_body(self) -> bool:
        """The producer sent body_base64: consumers get the body as base64 too, not as text."""
        return bool(self.sysflag & SysFlag.BINARY_BODY)

    @property
    def message_group(self) -> str | None:
        return self.properties.get(Prop.MESSAGE_GROUP)


RECORD_FIELDS: Final = (
    "topic",
    "body",
    "queue_id",
    "flag",
    "properties",
    "sysflag",
    "born_timestamp",
    "born_host",
    "store_timestamp",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
    "queue_offset",
    "physical_offset",
)
"""MessageRecord's fields in order: libs.codec.decode_record builds records positionally (half the cost of keywords)."""
assert tuple(f.name for f in fields(MessageRecord)) == RECORD_FIELDS, "reordered: see libs.codec.decode_record"


SYSTEM_PROPERTIES: Final = frozenset(
    value for name, value in vars(Prop).items() if name.isupper() and isinstance(value, str)
)


MESSAGE_ID_PATTERN: Final = "^[0-9A-Fa-f]{32}$"
"""A message id as Petrel makes them (MessageIdFactory) and takes them back (either case): 32 hex digits."""
_MESSAGE_ID = re.compile(MESSAGE_ID_PATTERN)


def is_message_id(text: str) -> bool:
    return _MESSAGE_ID.fullmatch(text) is not None


MESSAGE_ID_BYTES: Final = 16
NO_MESSAGE_ID: Final = bytes(MESSAGE_ID_BYTES)


def packed_message_id(message_id: str | None) -> bytes:
    """A message id in 16 bytes (where a fixed-size record keeps it); zeros for none, or one not of our form."""
    if message_id is None or not is_message_id(message_id):
        return NO_MESSAGE_ID
    return bytes.fromhex(message_id)


def unpacked_message_id(raw: bytes | memoryview) -> str | None:
    """The message id `packed_message_id` packed (upper case, as MessageIdFactory makes them); None for zeros."""
    raw = bytes(raw)
    return None if raw == NO_MESSAGE_ID else raw.hex().upper()


def same_message_id(a: str | None, b: str | None) -> bool:
    """Two spellings of one message id (ids are taken back in either case)."""
    return a is not None and b is not None and a.upper() == b.upper()


class MessageIdFactory:
    """Makes message ids: 32 upper-case hex digits, unique and roughly time-ordered.

    Layout of the 16 bytes: 6 bytes of milliseconds since the epoch, 4 bytes
    drawn at random once per process (so two processes never collide), 2 bytes
    of process id and a 4-byte counter. The id never changes after the send
    that created it: retries, delays and redrives carry it in `UNIQ_KEY`.
    """

    def __init__(self) -> None:
        self._prefix = (os.urandom(4) + (os.getpid() & 0xFFFF).to_bytes(2, "big")).hex().upper()
        self._counter = itertools.count(1)  # next() on it is atomic under the GIL: no lock per id

    def new_id(self, now_ms: int | None = None) -> str:
        counter = next(self._counter) & 0xFFFFFFFF
        millis = int(time.time() * 1000) if now_ms is None else now_ms
        return f"{millis & 0xFFFFFFFFFFFF:012X}{self._prefix}{counter:08X}"


def id_time(message_id: str) -> int:
    """The milliseconds a message id was made at (MessageIdFactory's layout); 0 when it is not one of ours."""
    try:
        return int(message_id[:12], 16) if len(message_id) == 32 else 0
    except ValueError:
        return 0
