"""A broker's memory of ended leases: each late call told why, the oldest forgotten first, little memory a lease."""

from __future__ import annotations

import gc
import sys

from libs.errors import AlreadyAcked, LeaseEnded, LeaseExpired, LeaseSuperseded
from services.broker.consume.ended_leases import EndedLeases

FIRST_LEASE = 1_000_000
"""Lease numbers past the interpreter's cached small ints, as a long-running broker's are."""


def test_each_ended_lease_answers_with_its_own_error_and_detail() -> None:
    ended = EndedLeases()
    ended.end(7)
    ended.end(8, LeaseSuperseded, "a visibility change replaced lease 8: use the newer handle")
    ended.end(9, LeaseExpired, "expired at attempt 2")

    acked, superseded, expired = ended.why(7), ended.why(8), ended.why(9)
    assert isinstance(acked, AlreadyAcked)
    assert acked.detail == "the message was acked already (lease 7)"
    assert isinstance(superseded, LeaseSuperseded)
    assert superseded.detail == "a visibility change replaced lease 8: use the newer handle"
    assert isinstance(expired, LeaseExpired)
    assert expired.detail == "expired at attempt 2"
    assert ended.why(10) is None


def test_each_late_call_gets_an_error_of_its_own() -> None:
    ended = EndedLeases()
    ended.end(7)
    first = ended.why(7)
    assert first is not None
    try:
        raise first
    except LeaseEnded:
        pass
    second = ended.why(7)
    assert second is not first
    assert second is not None
    assert second.__traceback__ is None  # nothing of the first raise is kept


def test_past_the_bound_the_oldest_are_forgotten() -> None:
    ended = EndedLeases(kept=3)
    for lease in range(1, 6):
        ended.end(lease)

    assert len(ended) == 3
    assert [ended.why(lease) is None for lease in range(1, 6)] == [True, True, False, False, False]


def test_a_remembered_ack_costs_its_entry_and_its_number_not_an_error_object() -> None:
    ended = EndedLeases()
    count = 20_000
    gc.collect()
    before = sys.getallocatedblocks()
    for lease in range(FIRST_LEASE, FIRST_LEASE + count):
        ended.end(lease)
    gc.collect()
    per_lease = (sys.getallocatedblocks() - before) / count
    assert per_lease <= 2.5  # the number, and the ordered dict's share; an error object each was seven blocks
