"""Transaction ids: what names a transaction in `/v1`, made and read in one place.

An id is opaque to its users. Inside it says which broker holds the half message,
its message id, and (since issue 29) the CommitLog offset of its first half copy,
so that an end reads that one record instead of walking the IndexFile (as
RocketMQ's end request carries the half's commitLogOffset, seed 004, 4.13):

    <broker>:<message id>                  before issue 29; still ended, through the index
    <broker>:<message id>.<offset in hex>  a half stored since

The offset is a hint the broker checks: the record there must be that message's
first half copy (retention may have deleted its segment, a replica's truncation
may have put another record there), else the broker finds the half by its id.

Which form a transaction has is the first half copy's to say, so that a check-back,
a listing and the send's answer name it alike: a half stored since issue 29 carries
ORIGIN_OFFSET, empty on the first copy (its own offset), the first copy's offset on
a renewed copy. A half stored before carries nothing, and keeps its old-form id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from libs.message import MessageRecord, Prop, is_message_id

ORIGIN_OFFSET: Final = Prop.TRANSACTION_ORIGIN
_OFFSET = re.compile(r"[0-9a-f]{1,16}")


@dataclass(frozen=True, slots=True)
class TransactionAddress:
    broker: str
    message_id: str
    half_offset: int | None
    """Where the first half copy was stored; None in an id of the old form."""

    def __str__(self) -> str:
        return transaction_id(self.broker, self.message_id, self.half_offset)


def transaction_id(broker: str, message_id: str, half_offset: int | None) -> str:
    if half_offset is None:
        return f"{broker}:{message_id}"
    return f"{broker}:{message_id}.{half_offset:x}"


def parse_transaction_id(text: str) -> TransactionAddress | None:
    """The parts of an id as `transaction_id` makes them; None for anything else."""
    broker, _, tail = text.rpartition(":")
    message_id, dot, offset = tail.partition(".")
    if not broker or not is_message_id(message_id) or (dot and _OFFSET.fullmatch(offset) is None):
        return None
    return TransactionAddress(broker, message_id, int(offset, 16) if dot else None)


def half_origin(record: MessageRecord) -> int | None:
    """The offset a half copy's transaction id carries: its first copy's; None for a half stored before ids did."""
    origin = record.properties.get(ORIGIN_OFFSET)
    if origin is None:
        return None
    return int(origin) if origin else record.physical_offset


def id_of_half(broker: str, record: MessageRecord) -> str:
    """The transaction id of a half copy (first or renewed) stored on `broker`."""
    return transaction_id(broker, record.message_id or "", half_origin(record))
