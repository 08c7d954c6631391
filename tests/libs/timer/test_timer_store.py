from __future__ import annotations

from pathlib import Path

import pytest

from libs.timer import Action, MessageRef, TimerStore
from tests.support.timer_store import SMALL, T0, StoreFactory, ref


def delivered(store: TimerStore, now_ms: int) -> list[tuple[int, int]]:
    """(due_ms, phy_offset) of what comes due by now_ms, all of it DELIVER."""
    entries = store.due(now_ms)
    assert all(e.action is Action.DELIVER for e in entries), entries
    return [(e.due_ms, e.ref.phy_offset) for e in entries]


def test_an_entry_comes_due_at_its_due_time_and_only_once(open_store: StoreFactory) -> None:
    store = open_store()
    position = store.enqueue(T0 + 1_250, ref(1), T0)
    assert store.due(T0 + 1_249) == []
    [entry] = store.due(T0 + 1_299)  # the slot [1200, 1300) is fired at its last millisecond
    assert (entry.position, entry.due_ms, entry.slot_ms, entry.ref, entry.roll_count) == (
        position,
        T0 + 1_250,
        T0 + 1_200,
        ref(1),
        0,
    )
    assert entry.action is Action.DELIVER
    assert store.due(T0 + 5_000) == []
    store.close()


def test_entries_come_out_in_due_order_across_slots(open_store: StoreFactory) -> None:
    store = open_store()
    for n, delay in enumerate([900, 100, 500, 100, 2_000, 0]):
        store.enqueue(T0 + delay, ref(n), T0)
    assert delivered(store, T0 + 199) == [(T0 + 0, 5000), (T0 + 100, 1000), (T0 + 100, 3000)]
    assert delivered(store, T0 + 3_000) == [(T0 + 500, 2000), (T0 + 900, 0), (T0 + 2_000, 4000)]
    store.close()


def test_an_entry_due_in_the_past_comes_out_at_the_next_call(open_store: StoreFactory) -> None:
    store = open_store()
    store.due(T0 + 1_000)
    store.enqueue(T0 + 200, ref(1), T0 + 1_000)
    assert delivered(store, T0 + 1_099) == [(T0 + 200, 1000)]
    store.close()


@pytest.mark.parametrize("precision", [100, 200, 500, 1000])
def test_every_precision_fires_a_slot_at_its_last_millisecond(open_store: StoreFactory, precision: int) -> None:
    store = open_store(precision_ms=precision, window_ms=precision * 100)
    store.enqueue(T0 + precision * 3 + 1, ref(1), T0)
    assert store.due(T0 + precision * 4 - 2) == []
    assert delivered(store, T0 + precision * 4 - 1) == [(T0 + precision * 3 + 1, 1000)]
    store.close()


def test_an_entry_beyond_the_roll_window_is_rolled_until_its_due_time(open_store: StoreFactory) -> None:
    store = open_store()  # window 10 s, roll window 5 s
    due_ms = T0 + 12_345
    store.enqueue(due_ms, ref(1), T0)
    assert store.stats().rolled == 1
    now, rolls, slots = T0, 0, []
    while True:
        now += 1_000
        entries = store.due(now)
        store.checkpoint()
        if not entries:
            continue
        [entry] = entries
        assert entry.due_ms == due_ms
        assert entry.roll_count == rolls
        slots.append(entry.slot_ms - T0)
        if entry.action is Action.DELIVER:
            break
        rolls += 1
        store.enqueue(entry.due_ms, entry.ref, now, roll_count=entry.roll_count + 1)
    assert rolls == 2
    assert slots == [5_000, 11_000, 12_300]  # now + roll window, twice, then the real due slot
    assert now == T0 + 13_000
    assert store.stats().pending == 0
    store.close()


def test_a_delay_over_the_maximum_is_refused(open_store: StoreFactory) -> None:
    store = open_store()
    store.enqueue(T0 + 60_000, ref(1), T0)
    with pytest.raises(ValueError, match="due 60001 ms from now; the longest delay is 60000 ms"):
        store.enqueue(T0 + 60_001, ref(2), T0)
    store.close()


def test_a_cancelled_entry_never_comes_due(open_store: StoreFactory) -> None:
    store = open_store()
    keep = store.enqueue(T0 + 500, ref(1), T0)
    drop = store.enqueue(T0 + 500, ref(2), T0)
    assert store.cancel(drop)
    assert not store.cancel(drop)
    assert store.stats().pending == 1
    assert delivered(store, T0 + 1_000) == [(T0 + 500, 1000)]
    assert not store.cancel(keep)  # already returned by due
    store.close()


def test_cancelling_a_rolled_entry_keeps_it_out_and_the_counters_right(open_store: StoreFactory) -> None:
    store = open_store()
    position = store.enqueue(T0 + 9_000, ref(1), T0)
    assert store.stats().rolled == 1
    assert store.cancel(position)
    assert (store.stats().pending, store.stats().rolled) == (0, 0)
    assert store.due(T0 + 20_000) == []
    store.close()


def test_cancel_survives_a_reopen(open_store: StoreFactory) -> None:
    store = open_store()
    drop = store.enqueue(T0 + 500, ref(1), T0)
    store.enqueue(T0 + 600, ref(2), T0)
    store.cancel(drop)
    store.abandon()
    store = open_store()
    assert delivered(store, T0 + 1_000) == [(T0 + 600, 2000)]
    store.close()


def test_a_clean_reopen_keeps_pending_entries_and_the_read_position(open_store: StoreFactory) -> None:
    store = open_store()
    for n in range(5):
        store.enqueue(T0 + 1_000 * n, ref(n), T0)
    assert delivered(store, T0 + 1_500) == [(T0, 0), (T0 + 1_000, 1000)]
    store.close()
    store = open_store(now_ms=0)  # an existing store keeps its own read position
    stats = store.stats()
    assert (stats.pending, stats.read_ms, stats.next_slot_ms) == (3, T0 + 1_500, T0 + 2_000)
    assert delivered(store, T0 + 9_999) == [(T0 + 2_000, 2000), (T0 + 3_000, 3000), (T0 + 4_000, 4000)]
    store.close()


def test_entries_not_checkpointed_come_due_again_after_a_crash(open_store: StoreFactory) -> None:
    store = open_store()
    store.enqueue(T0 + 100, ref(1), T0)
    store.enqueue(T0 + 300, ref(2), T0)
    assert len(store.due(T0 + 199)) == 1
    store.checkpoint()
    assert len(store.due(T0 + 999)) == 1
    store.abandon()  # fired, but the crash came before the checkpoint
    store = open_store()
    assert delivered(store, T0 + 999) == [(T0 + 300, 2000)]
    store.close()


def test_due_stops_a_window_past_the_committed_read_position(open_store: StoreFactory) -> None:
    store = open_store()
    store.due(T0 + 50_000)
    assert store.stats().read_ms == T0 + 9_900
    store.checkpoint()
    store.enqueue(T0 + 15_000, ref(1), T0 + 15_000)
    assert delivered(store, T0 + 50_000) == [(T0 + 15_000, 1000)]
    store.close()


def test_stats_report_pending_rolled_and_the_next_slot(open_store: StoreFactory) -> None:
    store = open_store()
    assert store.stats().next_slot_ms is None
    store.enqueue(T0 + 2_345, ref(1), T0)
    store.enqueue(T0 + 7_000, ref(2), T0)
    stats = store.stats()
    assert (stats.pending, stats.rolled, stats.next_slot_ms) == (2, 1, T0 + 2_300)
    assert store.stats(max_scan=10).next_slot_ms is None
    store.close()


def test_a_roll_window_that_is_not_below_the_window_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="roll_window_ms must be a multiple of precision_ms below window_ms"):
        TimerStore(tmp_path, now_ms=T0, **{**SMALL, "roll_window_ms": 10_000})


def test_pending_offsets_name_what_is_still_pending_after_a_checkpoint(open_store: StoreFactory) -> None:
    store = open_store()
    store.enqueue(T0 + 100, MessageRef(0, 500, 10), T0)  # fired before the checkpoint
    cancelled = store.enqueue(T0 + 5_000, MessageRef(0, 600, 10), T0)
    kept = store.enqueue(T0 + 5_000, MessageRef(0, 700, 10), T0)
    store.enqueue(T0 + 5_000, MessageRef(1, 100, 10), T0)  # another broker
    store.enqueue(T0 + 3_000, MessageRef(0, 900, 10), T0)
    store.due(T0 + 1_000)
    store.cancel(cancelled)
    store.checkpoint()

    assert store.pending_offsets(0, 800) == (700, [(kept, 700)])
    assert store.pending_offsets(1, 0) == (100, [])
    assert store.pending_offsets(0, 800, at_least=701) == (900, []), "offsets below the log's start are gone"
    store.enqueue(T0 + 6_000, MessageRef(0, 400, 10), T0 + 1_000)  # a retry: the low offset counts again
    assert store.pending_offsets(0, 0)[0] == 400
    store.close()
