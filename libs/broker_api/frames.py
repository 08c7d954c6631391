"""The binary answers of the broker's internal API, and how a client reads them.

- Pulled records (`GET .../queues/{q}/messages`, a DLQ peek): records in the binary
  codec end to end; the headers NEXT_OFFSET, MIN_OFFSET, MAX_OFFSET give where the
  next read starts and the queue's ends.
- ConsumeQueue units (`GET .../queues/{q}/units`): the queue's 20-byte units as the
  store keeps them (`libs.store.consume_queue.UNIT`: CommitLog offset, size, tag code
  or, in a schedule queue, the due time); NEXT_OFFSET is one past the last unit.
  With `ids=true` (answered with the header UNIT_IDS "true") each unit is followed by its
  message's id in 16 bytes (`libs.message.packed_message_id`, zeros when it has none of
  Petrel's form): the timer keeps it with its entry, and the broker checks it before a
  delivery.
- Records found by key (`GET /internal/messages`): records end to end; the header
  TRUNCATED says "true" when the broker read as many index entries as it may.
- Leased messages (`POST /internal/groups/{g}/topics/{t}/receive`)::

      u32 length | JSON [[receipt_handle, delivery_attempt, invisible_until], ...] (length bytes) | records

  one record per lease, in order.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from libs import jsonutil
from libs.broker_api.wire import MAX_OFFSET, MIN_OFFSET, NEXT_OFFSET, TRUNCATED, UNIT_IDS
from libs.message import MESSAGE_ID_BYTES, unpacked_message_id
from libs.store.consume_queue import UNIT

_U32: Final = struct.Struct(">I")
UNIT_WITH_ID: Final = struct.Struct(f"{UNIT.format}{MESSAGE_ID_BYTES}s")


@dataclass(frozen=True, slots=True)
class PulledBatch:
    """A pull's answer: records (binary codec, end to end) and the queue's offsets."""

    records: bytes
    next_offset: int
    min_offset: int
    max_offset: int

    @classmethod
    def read(cls, body: bytes, headers: Mapping[str, str]) -> PulledBatch:
        return cls(body, int(headers[NEXT_OFFSET]), int(headers[MIN_OFFSET]), int(headers[MAX_OFFSET]))


@dataclass(frozen=True, slots=True)
class KeyQueryAnswer:
    """A query by key's answer: records (binary codec, end to end), and whether the broker stopped at its bound."""

    records: bytes
    truncated: bool

    @classmethod
    def read(cls, body: bytes, headers: Mapping[str, str]) -> KeyQueryAnswer:
        return cls(body, headers.get(TRUNCATED) == "true")


def offset_headers(next_offset: int, min_offset: int, max_offset: int) -> dict[str, str]:
    """The headers of a pull's (or units read's) answer."""
    return {NEXT_OFFSET: str(next_offset), MIN_OFFSET: str(min_offset), MAX_OFFSET: str(max_offset)}


@dataclass(frozen=True, slots=True)
class DueUnit:
    """One message waiting in a schedule queue: where it is, and when it is due."""

    queue_offset: int
    physical_offset: int
    size: int
    due_ms: int
    message_id: str | None = None


def read_units(body: bytes, headers: Mapping[str, str]) -> list[DueUnit]:
    """The units of a units read's answer, each with its queue offset (and its message id, when it has them)."""
    if headers.get(UNIT_IDS) != "true":
        start = int(headers[NEXT_OFFSET]) - len(body) // UNIT.size
        return [DueUnit(start + i, phy, size, due) for i, (phy, size, due) in enumerate(UNIT.iter_unpack(body))]
    start = int(headers[NEXT_OFFSET]) - len(body) // UNIT_WITH_ID.size
    return [
        DueUnit(start + i, phy, size, due, unpacked_message_id(packed))
        for i, (phy, size, due, packed) in enumerate(UNIT_WITH_ID.iter_unpack(body))
    ]


@dataclass(frozen=True, slots=True)
class Lease:
    """A leased message as a broker's receive answers it: its handle and which attempt this is."""

    receipt_handle: str
    delivery_attempt: int
    invisible_until: int


def encode_leased(leases: list[Lease], records: list[bytes]) -> bytes:
    head = jsonutil.dumps([[lease.receipt_handle, lease.delivery_attempt, lease.invisible_until] for lease in leases])
    return b"".join([_U32.pack(len(head)), head, *records])


def decode_leased(body: bytes) -> tuple[list[Lease], memoryview]:
    """The leases and the records' bytes (one record per lease, in order)."""
    if len(body) < _U32.size:
        return [], memoryview(b"")
    (length,) = _U32.unpack_from(body)
    leases = [Lease(h, a, u) for h, a, u in jsonutil.loads(body[_U32.size : _U32.size + length])]
    return leases, memoryview(body)[_U32.size + length :]
