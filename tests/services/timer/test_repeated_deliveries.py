"""A delivery the timer makes again is stored once: after a crash before its checkpoint, or a flush timeout.

Every delivery of one scheduled record carries the same DEDUP token, so the broker
answers the copy it stored instead of storing another; two retries of one message
are different deliveries, and both arrive.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from libs.message import Prop
from libs.store.config import FlushMode
from tests.support.broker_calls import make_group, put, receive, settle
from tests.support.disk import stalled_disk
from tests.support.serving import ServedApp
from tests.support.timer_service import Broker, Timer


def due_of(stored: dict[str, object]) -> int:
    return int(str(stored["deliver_at"]))


async def test_deliveries_a_crash_repeats_before_the_checkpoint_store_no_second_copy(
    tmp_path: Path, nameserver: ServedApp, broker: Broker, timer: Timer
) -> None:
    by_level = broker.send("orders", "by-level", **{Prop.DELAY_LEVEL: "1"})
    broker.send("orders", "at-time", **{Prop.TIMER_DELIVER_MS: str(due_of(by_level))})
    due = due_of(by_level)
    timer.scheduler.keeper.interval_ms = 60_000  # checkpoints only every checkpoint interval (1 s)
    await timer.tick_at(due - 500)  # checkpointed: neither delivered yet
    await timer.tick_at(due)
    await timer.tick_at(due + 100)  # both delivered, before the next checkpoint (1 s after the last)
    assert sorted(broker.bodies("orders")) == ["at-time", "by-level"]

    timer.crash_and_restart(tmp_path, nameserver)
    await timer.tick_at(due + 200)
    await timer.tick_at(due + 300)

    assert sorted(broker.bodies("orders")) == ["at-time", "by-level"], "a repeated delivery stored a second copy"
    assert timer.scheduler.counters.delivered == 2, "the timer did not deliver again after its crash"


async def test_a_delivery_whose_flush_timed_out_is_not_put_again(
    broker: Broker, timer: Timer, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.restart(flush_mode=FlushMode.SYNC_FLUSH, sync_flush_timeout_ms=100)
    sent = broker.send("orders", "once", **{Prop.DELAY_LEVEL: "1"})
    await timer.tick_at(due_of(sent) - 500)
    with stalled_disk(monkeypatch) as disk:
        await timer.tick_at(due_of(sent))
        disk.set()
    for later in range(1, 6):  # past the retry interval of a failed delivery
        await timer.tick_at(due_of(sent) + later * 1_000)

    assert broker.bodies("orders") == ["once"], "the delivery was put again"
    assert timer.scheduler.counters.delivered == 1


async def test_two_retries_of_one_message_are_both_delivered(broker: Broker, timer: Timer) -> None:
    async with httpx.AsyncClient(base_url=broker.url) as client:
        await make_group(client)
        (message_id,) = await put(client, "flaky")
        attempts = []
        for _ in range(2):
            ((handle, attempt, _),) = await receive(client)
            attempts.append(attempt)
            await settle(client, "nack", handle, delay_ms=1_000)
            due_passed = max(int(time.time() * 1000) + 1_500, int(timer.clock.now * 1000) + 1_000)
            await timer.tick_at(due_passed)
            await timer.tick_at(due_passed + 100)
        ((_, last, record),) = await receive(client)

    assert (record.message_id, [*attempts, last]) == (message_id, [1, 2, 3])
    assert timer.scheduler.counters.delivered == 2
