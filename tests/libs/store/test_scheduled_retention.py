"""Retention never silently takes a pending scheduled message: kept while needed, rolled first, or reported lost."""

from __future__ import annotations

from libs.message import MessageRecord, Prop
from libs.names import TIMER_TOPIC
from libs.store.message_store import MessageStore
from tests.support.clock import FakeClock
from tests.support.store import Stores, age, fill, record, stored


def scheduled(message_id: str, due: int) -> bytes:
    properties = {Prop.REAL_TOPIC: "T", Prop.REAL_QUEUE_ID: "0", Prop.TIMER_DELIVER_MS: str(due)}
    return record(TIMER_TOPIC, 0, b"later", msg_id=message_id, properties=properties)


async def with_scheduled(store: MessageStore, *message_ids: str) -> list[int]:
    """Scheduled messages first (the oldest segment), then 300 others: six 64 KiB segments."""
    offsets = [stored(await store.put(scheduled(m, 2**40)))[0].physical_offset for m in message_ids]
    await fill(store, 300)
    return offsets


def reported_lost(store: MessageStore) -> list[MessageRecord]:
    """The messages retention reports lost from now on (filled in as it does)."""
    lost: list[MessageRecord] = []
    store.retention.loss_listeners.append(lost.append)
    return lost


async def test_time_based_retention_keeps_the_segment_a_pending_scheduled_message_is_in(
    stores: Stores, clock: FakeClock
) -> None:
    store = stores.open(file_reserved_hours=0.001)  # 3.6 s
    (offset,) = await with_scheduled(store, "S1")
    age(store, 3, clock)
    store.retention.report_needed(offset)

    assert store.delete_expired() == 0
    assert store.retention.roll_below() == 3 * 65536, "what is past half its retention is asked to be rolled"
    store.retention.report_needed(2 * 65536 + 10)  # rolled: now only the third segment is needed
    assert store.delete_expired() == 2
    assert store.commitlog.min_offset == 2 * 65536


async def test_disk_pressure_waits_for_the_roll_then_deletes_without_loss(stores: Stores, clock: FakeClock) -> None:
    store = stores.open(scheduled_roll_grace_seconds=30)
    (offset,) = await with_scheduled(store, "S1")
    lost = reported_lost(store)
    store.retention.report_needed(offset)

    assert store.delete_expired(force=True) == 0
    assert store.retention.roll_below() == 65536, "disk pressure asks for the oldest segment's roll"
    clock.advance(10)
    assert store.delete_expired(force=True) == 0
    await store.put(scheduled("S1", 2**40))  # the roll: a copy at the log's end
    store.retention.report_needed(store.commitlog.write_offset - 1)

    assert store.delete_expired(force=True) == 1
    assert lost == []


async def test_when_the_roll_cannot_happen_the_deleted_messages_are_reported_lost(
    stores: Stores, clock: FakeClock
) -> None:
    store = stores.open(scheduled_roll_grace_seconds=30)
    first, _ = await with_scheduled(store, "S1", "S2")
    await store.put(record("T", 0, b"later", msg_id="S2"))  # S2 was delivered meanwhile
    lost = reported_lost(store)
    store.retention.report_needed(first)

    assert store.delete_expired(force=True) == 0
    clock.advance(30)
    assert store.delete_expired(force=True) == 1

    assert [r.message_id for r in lost] == ["S1"]
    assert store.commitlog.min_offset == 65536
