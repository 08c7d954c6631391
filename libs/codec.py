"""The binary record codec: one format for CommitLog records and internal hot-path bodies.

Every integer is big-endian. A record is self-delimiting (it starts with its own
length), so a batch is simply records laid end to end.

Message record::

    offset  size  field                         type
    ------  ----  ----------------------------  -------------------------------------
         0     4  total_size                    int32, the whole record, this field included
         4     4  magic                         uint32, MESSAGE_MAGIC
         8     4  crc                           uint32, CRC32 of bytes [12, total_size)
        12     4  queue_id                      int32
        16     4  flag                          int32, the producer's opaque flag
        20     8  queue_offset                  int64, index in the ConsumeQueue
        28     8  physical_offset               int64, CommitLog offset of this record
        36     4  sysflag                       int32, see libs.message.SysFlag
        40     8  born_timestamp                int64, ms since the epoch
        48    20  born_host                     16-byte IPv6 (IPv4 is ::ffff:a.b.c.d) + uint32 port
        68     8  store_timestamp               int64, ms since the epoch
        76    20  store_host                    as born_host
        96     4  reconsume_times               int32
       100     8  prepared_transaction_offset   int64
       108     4  body_length                   int32
       112     B  body                          bytes
     112+B     2  topic_length                  uint16
     114+B     T  topic                         UTF-8
   114+B+T     2  properties_length             uint16
   116+B+T     P  properties                    UTF-8, "key\\x01value\\x02" repeated

Blank filler (ends a CommitLog segment whose free space cannot hold the next record)::

         0     4  total_size                    int32, bytes from here to the segment's end
         4     4  magic                         uint32, BLANK_MAGIC

Quarantine filler (stands where `petrel store repair` took a damaged record out, so
every record after it keeps its offset; the damaged bytes are kept in a file under
`quarantine/`)::

         0     4  total_size                    int32, bytes it covers
         4     4  magic                         uint32, QUARANTINE_MAGIC; zeros follow

The CRC covers everything after the crc field, so a torn or altered header is
caught as surely as a torn body. `stamp_record` rewrites the broker-assigned
fields of an encoded record in place and refreshes the CRC, so the broker never
decodes and re-encodes what the gateway sent.

This module is the only one that knows the layout. A reader that wants one field
of a stored record without decoding it (the CommitLog's recovery scan, a
lookup, the offline tools) uses the `peek_*` accessors or the `*_AT` offsets
below, each asserted against `HEADER`.
"""

from __future__ import annotations

import ipaddress
import mmap
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from libs.errors import CorruptRecord, InvalidMessage
from libs.message import MessageRecord

MESSAGE_MAGIC: Final = 0xDAA320A7
BLANK_MAGIC: Final = 0xCBD43194
QUARANTINE_MAGIC: Final = 0xBAD0C0DE

HEADER: Final = struct.Struct(">iIIiiqqiq20sq20siqi")
LENGTH_MAGIC: Final = struct.Struct(">iI")
STAMP_OFFSETS: Final = struct.Struct(">qq")
STAMP_STORE: Final = struct.Struct(">q20s")
U16: Final = struct.Struct(">H")
U32: Final = struct.Struct(">I")
INT32: Final = struct.Struct(">i")
INT64: Final = struct.Struct(">q")

assert HEADER.size == 112, HEADER.size
assert LENGTH_MAGIC.size == 8
assert STAMP_OFFSETS.size == 16  # queue_offset, physical_offset: bytes [20, 36)
assert STAMP_STORE.size == 28  # store_timestamp, store_host: bytes [68, 96)

# Where a field starts inside a record (the table above).
MAGIC_AT: Final = 4
CRC_AT: Final = 8
QUEUE_ID_AT: Final = 12
QUEUE_OFFSET_AT: Final = 20
PHYSICAL_OFFSET_AT: Final = 28
SYSFLAG_AT: Final = 36
STORE_TIMESTAMP_AT: Final = 68
RECONSUME_TIMES_AT: Final = 96
BODY_LENGTH_AT: Final = 108
BODY_START: Final = HEADER.size
for _at, _before in (
    (MAGIC_AT, "i"),
    (CRC_AT, "iI"),
    (QUEUE_ID_AT, "iII"),
    (QUEUE_OFFSET_AT, "iIIii"),
    (PHYSICAL_OFFSET_AT, "iIIiiq"),
    (SYSFLAG_AT, "iIIiiqq"),
    (STORE_TIMESTAMP_AT, "iIIiiqqiq20s"),
    (RECONSUME_TIMES_AT, "iIIiiqqiq20sq20s"),
    (BODY_LENGTH_AT, "iIIiiqqiq20sq20siq"),
):
    assert HEADER.format.startswith(">" + _before), _before
    assert struct.calcsize(">" + _before) == _at, (_at, _before)
del _at, _before

CRC_START: Final = QUEUE_ID_AT
"""The CRC covers the record from here (right after the crc field) to its end."""
FRAME_SIZE: Final = LENGTH_MAGIC.size
"""total_size and magic: what every record and filler starts with."""
MIN_RECORD_SIZE: Final = HEADER.size + U16.size * 2
BLANK_MIN_SIZE: Final = FRAME_SIZE

MAX_BODY_SIZE: Final = 4 * 1024 * 1024
MAX_TOPIC_BYTES: Final = 255
MAX_PROPERTIES_BYTES: Final = 32 * 1024
MAX_RECORD_SIZE: Final = MIN_RECORD_SIZE + MAX_BODY_SIZE + MAX_TOPIC_BYTES + MAX_PROPERTIES_BYTES

Readable = bytes | bytearray | memoryview | mmap.mmap
"""Anything a record can be read from: a request body, a batch, a CommitLog segment's map."""
Writable = bytearray | memoryview | mmap.mmap

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"


@lru_cache(maxsize=4096)
def pack_host(host: str) -> bytes:
    """'ip:port' (IPv6 as '[ip]:port') to 20 bytes."""
    address, sep, port = host.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise InvalidMessage(f"host {host!r} is not 'address:port' with a port from 0 to 65535")
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError as exc:
        raise InvalidMessage(f"host {host!r} has no valid IP address") from exc
    # bytes are joined, not added, in the hot modules: deploy/compiled.py (LEAKY_PRIMITIVES)
    packed = ip.packed if ip.version == 6 else b"".join((b"\x00" * 10, b"\xff\xff", ip.packed))
    return b"".join((packed, U32.pack(int(port))))


@lru_cache(maxsize=4096)
def unpack_host(raw: bytes) -> str:
    ip = ipaddress.IPv6Address(raw[:16])
    port = U32.unpack_from(raw, 16)[0]
    if ip.ipv4_mapped is not None:
        return f"{ip.ipv4_mapped}:{port}"
    return f"[{ip}]:{port}"


def encode_properties(properties: Mapping[str, str]) -> bytes:
    text = "".join(f"{n}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for n, v in properties.items())
    # Each pair adds one of each separator: any more means a name or value holds one (checked in C, per record).
    if text.count(NAME_VALUE_SEPARATOR) != len(properties) or text.count(PROPERTY_SEPARATOR) != len(properties):
        name = next(n for n, v in properties.items() if {NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR} & {*n, *v})
        raise InvalidMessage(f"property {name!r} contains a reserved control character (\\x01 or \\x02)")
    if "" in properties:
        raise InvalidMessage("a property name is empty")
    return text.encode()


def decode_properties(raw: bytes | bytearray) -> dict[str, str]:
    result: dict[str, str] = {}
    for pair in raw.decode().split(PROPERTY_SEPARATOR):
        if pair:
            name, _, value = pair.partition(NAME_VALUE_SEPARATOR)
            result[name] = value
    return result


def encode_record(record: MessageRecord) -> bytes:
    """Encode one message; raises InvalidMessage for what the format cannot hold."""
    head = (
        record.queue_id,
        record.flag,
        record.queue_offset,
        record.physical_offset,
        record.sysflag,
        record.born_timestamp,
        pack_host(record.born_host),
        record.store_timestamp,
        pack_host(record.store_host),
        record.reconsume_times,
        record.prepared_transaction_offset,
    )
    return _encoded(record.topic, record.properties, record.body, head)


def encode_new_record(
    topic: str, body: bytes, properties: Mapping[str, str], sysflag: int, born_timestamp: int, born_host: bytes
) -> bytes:
    """What `encode_record` gives for a producer's new record (queue 0, no flag, nothing stored yet: what a gateway
    sends), from its fields, the born host packed once by the caller (`pack_host`): no MessageRecord built (a
    frozen dataclass of 14 fields, more than half the cost of the encoding; the gateway encodes one a message)."""
    head = (0, 0, 0, 0, sysflag, born_timestamp, born_host, 0, UNSTAMPED_HOST, 0, 0)
    return _encoded(topic, properties, body, head)


def recast_record(
    buf: Readable, offset: int, topic: str, queue_id: int, properties: Mapping[str, str], sysflag: int
) -> bytes:
    """The record at `offset` as another topic's record (a half copy, a committed copy), encoded: its body, flag,
    born fields, reconsume times and prepared offset kept, its store fields zeroed for the store to stamp. What
    `encode_record` gives for the decoded record with those fields replaced, without decoding the body or building
    a MessageRecord (the transaction path makes two a message). Checks the framing, not the CRC."""
    total, blank = record_size(buf, offset)
    if blank:
        raise CorruptRecord(offset, "expected a message record, found a blank filler")
    fields = HEADER.unpack_from(buf, offset)
    body_len = fields[14]
    if body_len < 0 or BODY_START + body_len + U16.size > total:
        raise CorruptRecord(offset, f"body length {body_len} overruns the record of {total} bytes")
    body = bytes(buf[offset + BODY_START : offset + BODY_START + body_len])
    head = (queue_id, fields[4], 0, 0, sysflag, fields[8], fields[9], 0, UNSTAMPED_HOST, fields[12], fields[13])
    return _encoded(topic, properties, body, head)


UNSTAMPED_HOST: Final = pack_host(MessageRecord.__dataclass_fields__["store_host"].default)
"""The store host of a record not stored yet (MessageRecord's default), packed."""

Head = tuple[int, int, int, int, int, int, bytes, int, bytes, int, int]
"""queue_id, flag, queue_offset, physical_offset, sysflag, born_timestamp, born_host (packed), store_timestamp,
store_host (packed), reconsume_times, prepared_transaction_offset: HEADER's fields after the crc, before the body."""


def _encoded(topic: str, properties: Mapping[str, str], body: bytes, head: Head) -> bytes:
    try:
        topic_raw = topic.encode()
        properties_raw = encode_properties(properties)
    except UnicodeEncodeError as exc:
        raise InvalidMessage(f"topic or a property is not valid Unicode text: {exc.reason}") from exc
    if len(body) > MAX_BODY_SIZE:
        raise InvalidMessage(f"body is {len(body)} bytes; the limit is {MAX_BODY_SIZE}")
    if not topic_raw or len(topic_raw) > MAX_TOPIC_BYTES:
        raise InvalidMessage(f"topic must be 1 to {MAX_TOPIC_BYTES} bytes")
    if len(properties_raw) > MAX_PROPERTIES_BYTES:
        raise InvalidMessage(f"properties are {len(properties_raw)} bytes encoded; the limit is {MAX_PROPERTIES_BYTES}")
    total = MIN_RECORD_SIZE + len(body) + len(topic_raw) + len(properties_raw)
    try:
        header = HEADER.pack(total, MESSAGE_MAGIC, 0, *head, len(body))
    except struct.error as exc:
        raise InvalidMessage(f"a numeric field is out of its range: {exc}") from exc
    tail = b"".join((U16.pack(len(topic_raw)), topic_raw, U16.pack(len(properties_raw)), properties_raw))
    crc = zlib.crc32(tail, zlib.crc32(body, zlib.crc32(memoryview(header)[CRC_START:])))
    return b"".join((header[:CRC_AT], U32.pack(crc), header[CRC_START:], body, tail))


def stamp_record(
    buf: Writable,
    offset: int,
    *,
    queue_offset: int,
    physical_offset: int,
    store_timestamp: int,
    store_host: str,
) -> None:
    """Write the broker-assigned fields of the record at `offset` and refresh its CRC."""
    total = LENGTH_MAGIC.unpack_from(buf, offset)[0]
    STAMP_OFFSETS.pack_into(buf, offset + QUEUE_OFFSET_AT, queue_offset, physical_offset)
    STAMP_STORE.pack_into(buf, offset + STORE_TIMESTAMP_AT, store_timestamp, pack_host(store_host))
    U32.pack_into(buf, offset + CRC_AT, computed_crc(buf, offset, total))


def encode_blank(size: int) -> bytes:
    if size < BLANK_MIN_SIZE:
        raise ValueError(f"a blank filler needs at least {BLANK_MIN_SIZE} bytes, got {size}")
    return b"".join((LENGTH_MAGIC.pack(size, BLANK_MAGIC), bytes(size - BLANK_MIN_SIZE)))  # not +: deploy/compiled.py


def encode_quarantined(size: int) -> bytes:
    if size < BLANK_MIN_SIZE:
        raise ValueError(f"a quarantine filler needs at least {BLANK_MIN_SIZE} bytes, got {size}")
    return b"".join((LENGTH_MAGIC.pack(size, QUARANTINE_MAGIC), bytes(size - BLANK_MIN_SIZE)))  # not +


def record_size(buf: Readable, offset: int = 0) -> tuple[int, bool]:
    """(total_size, is_blank) of the record at `offset`, checking only length and magic."""
    if len(buf) - offset < LENGTH_MAGIC.size:
        raise CorruptRecord(offset, f"only {len(buf) - offset} bytes left, a record header needs {FRAME_SIZE}")
    total, magic = LENGTH_MAGIC.unpack_from(buf, offset)
    if magic == BLANK_MAGIC:
        if total < BLANK_MIN_SIZE or offset + total > len(buf):
            raise CorruptRecord(offset, f"blank filler claims {total} bytes, {len(buf) - offset} are there")
        return total, True
    if magic != MESSAGE_MAGIC:
        raise CorruptRecord(offset, f"bad magic code 0x{magic:08x}")
    if not MIN_RECORD_SIZE <= total <= MAX_RECORD_SIZE:
        raise CorruptRecord(offset, f"record length {total} is outside [{MIN_RECORD_SIZE}, {MAX_RECORD_SIZE}]")
    if offset + total > len(buf):
        raise CorruptRecord(offset, f"record claims {total} bytes, only {len(buf) - offset} are there (torn write?)")
    return total, False


def decode_record(buf: Readable, offset: int = 0, *, verify_crc: bool = True) -> MessageRecord:
    """Decode the message record at `offset`; CorruptRecord names exactly what is wrong."""
    total, blank = record_size(buf, offset)
    if blank:
        raise CorruptRecord(offset, "expected a message record, found a blank filler")
    view = memoryview(buf)[offset : offset + total]
    fields = HEADER.unpack_from(view)
    if verify_crc:
        actual = zlib.crc32(view[CRC_START:])
        if actual != fields[2]:
            raise CorruptRecord(offset, f"CRC mismatch: stored 0x{fields[2]:08x}, computed 0x{actual:08x}")
    body_len = fields[14]
    pos = BODY_START + body_len
    if body_len < 0 or pos + U16.size > total:
        raise CorruptRecord(offset, f"body length {body_len} overruns the record of {total} bytes")
    topic_len = U16.unpack_from(view, pos)[0]
    props_pos = pos + U16.size + topic_len
    if props_pos + U16.size > total:
        raise CorruptRecord(offset, f"topic length {topic_len} overruns the record")
    props_len = U16.unpack_from(view, props_pos)[0]
    if props_pos + U16.size + props_len != total:
        raise CorruptRecord(offset, f"field lengths add up to {props_pos + U16.size + props_len}, record says {total}")
    try:
        topic = bytes(view[pos + U16.size : props_pos]).decode()
        properties = decode_properties(bytes(view[props_pos + U16.size : total]))
    except UnicodeDecodeError as exc:
        raise CorruptRecord(offset, f"topic or properties are not UTF-8: {exc}") from exc
    # Positional, in RECORD_FIELDS' order (asserted where MessageRecord is defined): keywords cost a frozen
    # dataclass twice as much (3.2 against 1.5 us a record; a receive decodes every message it answers).
    return MessageRecord(
        topic,
        bytes(view[BODY_START : BODY_START + body_len]),
        fields[3],  # queue_id
        fields[4],  # flag
        properties,
        fields[7],  # sysflag
        fields[8],  # born_timestamp
        unpack_host(fields[9]),  # born_host
        fields[10],  # store_timestamp
        unpack_host(fields[11]),  # store_host
        fields[12],  # reconsume_times
        fields[13],  # prepared_transaction_offset
        fields[5],  # queue_offset
        fields[6],  # physical_offset
    )


@dataclass(frozen=True, slots=True)
class RecordHead:
    """What the write path needs of an encoded record, read without decoding the body."""

    total_size: int
    queue_id: int
    topic: str
    properties: dict[str, str]


def peek_head(buf: Readable, offset: int = 0) -> RecordHead:
    """Topic, queue id and properties of the record at `offset`, checking its framing (not its CRC)."""
    total, blank = record_size(buf, offset)
    if blank:
        raise CorruptRecord(offset, "expected a message record, found a blank filler")
    queue_id = INT32.unpack_from(buf, offset + QUEUE_ID_AT)[0]
    body_len = INT32.unpack_from(buf, offset + BODY_LENGTH_AT)[0]
    pos = offset + BODY_START + body_len
    end = offset + total
    if body_len < 0 or pos + U16.size > end:
        raise CorruptRecord(offset, f"body length {body_len} overruns the record of {total} bytes")
    topic_len = U16.unpack_from(buf, pos)[0]
    props_pos = pos + U16.size + topic_len
    if props_pos + U16.size > end or props_pos + U16.size + U16.unpack_from(buf, props_pos)[0] != end:
        raise CorruptRecord(offset, "topic and properties lengths do not add up to the record length")
    try:
        topic = bytes(buf[pos + U16.size : props_pos]).decode()
        properties = decode_properties(bytes(buf[props_pos + U16.size : end]))
    except UnicodeDecodeError as exc:
        raise CorruptRecord(offset, f"topic or properties are not UTF-8: {exc}") from exc
    return RecordHead(total, queue_id, topic, properties)


def peek_property(buf: Readable, name: str, offset: int = 0) -> str | None:
    """One property of the stored record at `offset`, found in its encoded properties without decoding the
    others (the consume path wants a message's id, UNIQ_KEY, for each record it leases).

    For records the store holds, whose framing was checked when they were put; `peek_head` checks it.
    """
    body_len = INT32.unpack_from(buf, offset + BODY_LENGTH_AT)[0]
    pos = offset + BODY_START + body_len
    start = pos + U16.size + U16.unpack_from(buf, pos)[0] + U16.size
    encoded = bytes(buf[start : offset + record_size(buf, offset)[0]])
    key = f"{name}{NAME_VALUE_SEPARATOR}".encode()  # not +: deploy/compiled.py
    if encoded.startswith(key):
        at = len(key)
    else:
        found = encoded.find(f"{PROPERTY_SEPARATOR}{name}{NAME_VALUE_SEPARATOR}".encode())
        if found < 0:
            return None
        at = found + 1 + len(key)
    return encoded[at : encoded.index(PROPERTY_SEPARATOR.encode(), at)].decode()


def peek_topic(buf: Readable, offset: int = 0) -> bytes:
    """The encoded topic of the message record at `offset`, read without its properties (a cheap first look).

    Checks only that it lies inside the record; `peek_head` checks the framing.
    """
    total, blank = record_size(buf, offset)
    if blank:
        raise CorruptRecord(offset, "expected a message record, found a blank filler")
    body_len = INT32.unpack_from(buf, offset + BODY_LENGTH_AT)[0]
    pos = offset + BODY_START + body_len
    if body_len < 0 or pos + U16.size > offset + total:
        raise CorruptRecord(offset, f"body length {body_len} overruns the record of {total} bytes")
    end = pos + U16.size + U16.unpack_from(buf, pos)[0]
    if end > offset + total:
        raise CorruptRecord(offset, "the topic overruns the record")
    return bytes(buf[pos + U16.size : end])


def set_queue_id(buf: Writable, offset: int, queue_id: int) -> None:
    """Change the queue id of an encoded record (the CRC is refreshed by `stamp_record`)."""
    INT32.pack_into(buf, offset + QUEUE_ID_AT, queue_id)


def encode_batch(records: list[MessageRecord]) -> bytes:
    """Records laid end to end: the body of a batch put or a pull answer."""
    return b"".join(encode_record(r) for r in records)


def iter_records(buf: Readable) -> Iterator[MessageRecord]:
    """Decode records laid end to end; raises CorruptRecord at the first bad one."""
    offset = 0
    while offset < len(buf):
        record = decode_record(buf, offset)
        yield record
        offset += LENGTH_MAGIC.unpack_from(buf, offset)[0]


# ---- one field of a record, read without decoding it (no checks: callers frame first) ----


def peek_frame(buf: Readable, offset: int = 0) -> tuple[int, int]:
    """(total_size, magic) at `offset`: what a record or filler starts with; (0, 0) where nothing was written."""
    total, magic = LENGTH_MAGIC.unpack_from(buf, offset)
    return int(total), int(magic)


def peek_queue_id(buf: Readable, offset: int = 0) -> int:
    return int(INT32.unpack_from(buf, offset + QUEUE_ID_AT)[0])


def peek_offsets(buf: Readable, offset: int = 0) -> tuple[int, int]:
    """(queue_offset, physical_offset) of a stored record, without decoding it."""
    queue_offset, physical_offset = STAMP_OFFSETS.unpack_from(buf, offset + QUEUE_OFFSET_AT)
    return int(queue_offset), int(physical_offset)


def peek_store_timestamp(buf: Readable, offset: int = 0) -> int:
    """The store timestamp (ms) the broker stamped into the record at `offset`."""
    return int(INT64.unpack_from(buf, offset + STORE_TIMESTAMP_AT)[0])


def peek_sysflag(buf: Readable, offset: int = 0) -> int:
    return int(INT32.unpack_from(buf, offset + SYSFLAG_AT)[0])


def peek_reconsume_times(buf: Readable, offset: int = 0) -> int:
    return int(INT32.unpack_from(buf, offset + RECONSUME_TIMES_AT)[0])


def stored_crc(buf: Readable, offset: int = 0) -> int:
    """The CRC written in the record at `offset`."""
    return int(U32.unpack_from(buf, offset + CRC_AT)[0])


def computed_crc(buf: Readable, offset: int, total: int) -> int:
    """The CRC of the `total`-byte record at `offset` as its bytes are now."""
    return zlib.crc32(memoryview(buf)[offset + CRC_START : offset + total])


def crc_matches(buf: Readable, offset: int, total: int) -> bool:
    return stored_crc(buf, offset) == computed_crc(buf, offset, total)
