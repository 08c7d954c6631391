"""What the MessageStore answers: PutResult and PutOutcome for a put, PullResult for a pull, KeyQueryResult.

Apart from message_store so that the store's parts (lookup: a DEDUP put's stored copy)
can build them without importing the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from libs.errors import FlushTimeout, PetrelError
from libs.message import MessageRecord


class PutResult(NamedTuple):
    """Where and when one record was stored.

    An immutable named tuple rather than a frozen dataclass: the store makes one per
    record it appends, and a frozen dataclass's __init__ (object.__setattr__ per field)
    cost as much as stamping the record.
    """

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    store_timestamp: int
    message_id: str | None
    duplicate: bool = False
    """The record was not stored again: this is the copy a put with the same message id stored before."""
    due_at: int | None = None
    """For a duplicate of a scheduled record: when the stored copy is due (ms)."""


@dataclass(frozen=True, slots=True)
class PutOutcome:
    stored: list[PutResult]
    failure: PetrelError | None = None
    """Why the record after the last stored one was not stored; later ones were not tried."""
    not_durable: FlushTimeout | None = None
    """SYNC_FLUSH only: the records are stored (in the CommitLog, found by reads) but the disk did not confirm them."""


def stored_entries(stored: list[PutResult], scheduled: dict[int, int] | None = None) -> list[dict[str, object]]:
    """Where each record of a put is, as the broker answers it (PutEntry's fields as plain data).

    `scheduled`: index -> when a record kept back by this put is due (ms).
    """
    due = scheduled or {}
    return [
        {
            "topic": r.topic,
            "queue_id": r.queue_id,
            "queue_offset": r.queue_offset,
            "physical_offset": r.physical_offset,
            "store_timestamp": r.store_timestamp,
            "message_id": r.message_id,
            "deliver_at": r.due_at if r.duplicate else due.get(index),
        }
        for index, r in enumerate(stored)
    ]


def refused_after_append(refusal: PetrelError, outcome: PutOutcome) -> PetrelError:
    """`refusal` (its problem type unchanged) of a put whose records are appended: they may survive, so it says
    `maybe_stored` and where they are (`stored`), and a producer must not send them anywhere else."""
    refusal.extensions.update(maybe_stored=True, stored=stored_entries(outcome.stored))
    return refusal


@dataclass(frozen=True, slots=True)
class PullResult:
    records: list[bytes]
    next_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class KeyQueryResult:
    records: list[MessageRecord]
    """Newest first."""
    truncated: bool = False
    """The look-up read as many index entries as it may: more messages with the key may be stored."""
