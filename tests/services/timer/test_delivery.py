"""Timer deliveries succeed or fail one entry at a time; the level scan passes a queue in order, once."""

from __future__ import annotations

from libs.delay import DEFAULT_DELAY_LEVELS, parse_delay_levels
from libs.message import Prop
from libs.timer import MessageRef
from tests.support.timer_service import Broker, Timer

HOUR_MS = 3_600_000


def levels(first: str) -> tuple[int, ...]:
    """The default delay levels, level 1 changed (an operator's config change between restarts)."""
    return parse_delay_levels(" ".join([first, *DEFAULT_DELAY_LEVELS.split()[1:]]))


def due_of(stored: dict[str, object]) -> int:
    return int(str(stored["deliver_at"]))


async def test_a_refused_level_entry_holds_back_no_other_and_is_dropped_loudly_after_its_tries(
    broker: Broker, timer: Timer
) -> None:
    broker.create("gone")
    broker.send("orders", "first", **{Prop.DELAY_LEVEL: "1"})
    doomed = broker.send("gone", "doomed", **{Prop.DELAY_LEVEL: "1"})
    last = broker.send("orders", "last", **{Prop.DELAY_LEVEL: "1"})
    broker.delete("gone")

    now = due_of(last)
    await timer.tick_at(now)
    assert broker.bodies("orders") == ["first", "last"]
    for _ in range(6):  # past every backoff: the refused one is tried 3 times in all, then dropped
        now += 61_000
        await timer.tick_at(now)

    assert broker.bodies("orders") == ["first", "last"], "a stored delivery was put again"
    (failed,) = timer.emitted("delay_failed")
    assert (failed["message_id"], failed["topic"], failed["attempts"]) == ("ID-doomed", "gone", 3)
    assert failed["deliver_at"] >= due_of(doomed)
    assert "topic-not-found" in failed["reason"]
    assert timer.scheduler.counters.failed == 1
    assert timer.scheduler.counters.level_pending[("broker-a", 0)] == 0


async def test_a_refused_wheel_entry_is_retried_with_backoff_without_repeating_the_others(
    broker: Broker, timer: Timer
) -> None:
    start = timer.clock.now * 1000
    at = str(int(start) + 10_000)
    broker.send("orders", "a", **{Prop.TIMER_DELIVER_MS: at})
    await timer.tick_at(int(start))
    store_id = timer.scheduler.progress.cursors("broker-a").store_id
    # An entry whose record is not there (its segment was deleted): the broker refuses it.
    timer.scheduler.store.enqueue(int(at), MessageRef(store_id, 10**12, 100), int(start))
    broker.send("orders", "b", **{Prop.TIMER_DELIVER_MS: at})
    await timer.tick_at(int(start) + 1)

    first_try = now = int(at) + 200
    await timer.tick_at(now)
    assert broker.bodies("orders") == ["a", "b"]
    for _ in range(20):
        now += 500
        await timer.tick_at(now)

    assert broker.bodies("orders") == ["a", "b"], "a stored delivery was put again"
    (failed,) = timer.emitted("delay_failed")
    # Tried 3 times: first, 1 s later, 2 s after that (then dropped); seen by ticks 500 ms apart.
    assert first_try + 3_000 <= failed["ts"] <= first_try + 4_000
    assert (failed["attempts"], failed["physical_offset"], failed["message_id"]) == (3, 10**12, None)
    assert "offset-out-of-range" in failed["reason"]


async def test_a_broker_that_cannot_store_delays_a_level_by_the_retry_interval_only(
    broker: Broker, timer: Timer
) -> None:
    soon = broker.send("orders", "soon", **{Prop.DELAY_LEVEL: "1"})
    broker.restart(delay_levels=levels("2h"))
    broker.send("orders", "in two hours", **{Prop.DELAY_LEVEL: "1"})
    broker.restart(disk_refuse_ratio=0.0001)  # every put refused: store full

    await timer.tick_at(due_of(soon))
    assert broker.bodies("orders") == []
    broker.restart()
    await timer.tick_at(due_of(soon) + 1_100)

    assert broker.bodies("orders") == ["soon"], "the level waited for its next message, not the retry interval"


async def test_the_level_scan_passes_units_in_order_whatever_the_clocks_do(broker: Broker, timer: Timer) -> None:
    first = broker.send("orders", "first", **{Prop.DELAY_LEVEL: "1"})
    broker.restart(delay_levels=levels("2h"))
    middle = broker.send("orders", "middle", **{Prop.DELAY_LEVEL: "1"})
    broker.restart()
    third = broker.send("orders", "third", **{Prop.DELAY_LEVEL: "1"})  # due before "middle"

    await timer.tick_at(due_of(third) + 1_000)
    assert broker.bodies("orders") == ["first"], "a unit was delivered before the one ahead of it"
    await timer.tick_at(due_of(first) - HOUR_MS)  # the timer's clock goes back
    await timer.tick_at(due_of(third) + 5_000)
    assert broker.bodies("orders") == ["first"]
    await timer.tick_at(due_of(middle))
    await timer.tick_at(due_of(middle) + 1_000)

    assert broker.bodies("orders") == ["first", "middle", "third"]
    assert timer.scheduler.counters.delivered == 3


async def test_a_cursor_past_a_queue_that_lost_its_tail_delivers_what_is_stored_at_reused_offsets(
    broker: Broker, timer: Timer
) -> None:
    # What a broker's ASYNC_FLUSH crash leaves: the timer passed offsets 0-4, the queue came back shorter.
    cursors = timer.scheduler.progress.cursors("broker-a")
    cursors.levels[0] = 5
    cursors.timer = 5
    by_level = broker.send("orders", "by-level", **{Prop.DELAY_LEVEL: "1"})
    at_time = broker.send("orders", "at-time", **{Prop.TIMER_DELIVER_MS: str(due_of(by_level))})

    await timer.tick_at(max(due_of(by_level), due_of(at_time)))
    await timer.tick_at(max(due_of(by_level), due_of(at_time)) + 1_000)

    assert sorted(broker.bodies("orders")) == ["at-time", "by-level"]
