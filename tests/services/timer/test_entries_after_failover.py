"""A timer entry is delivered only if its offset still holds its message: after a failover the broker name's
new log may hold another there (issue 27)."""

from __future__ import annotations

import re
from pathlib import Path

from libs.message import Prop
from tests.support.serving import ServedApp
from tests.support.timer_service import Broker, Timer

IDS = {name: f"0191A2B3C4D5E6F7A8B9C0D1{n:08X}" for n, name in enumerate(["a", "b", "c", "x"])}


def counted(metrics: str, outcome: str) -> float:
    found = re.search(rf'petrel_broker_scheduled_mismatched_total{{outcome="{outcome}"}} (\S+)', metrics)
    assert found is not None, metrics
    return float(found.group(1))


def send_timed(broker: Broker, body: str, due: int) -> int:
    stored = broker.send("orders", body, **{Prop.UNIQ_KEY: IDS[body], Prop.TIMER_DELIVER_MS: str(due)})
    return int(stored["physical_offset"])


async def test_an_entry_whose_offset_holds_another_message_delivers_its_own_or_reports_it_lost(
    tmp_path: Path, nameserver: ServedApp, broker: Broker, timer: Timer
) -> None:
    now = int(timer.clock.now * 1000)
    due = now + 10_000
    # The log the new master will have: another history, the same sizes (a slave that diverged).
    promoted = Broker(broker.settings.model_copy(update={"data_dir": tmp_path / "promoted"}))
    broker.stop()
    promoted.start()
    promoted.create("orders")
    promoted.send("orders", "filler")
    x_at = send_timed(promoted, "x", due)  # its timer copy was passed long ago by the timer's cursor
    b_at = send_timed(promoted, "b", due)
    a_there = send_timed(promoted, "a", due)  # the same scheduled copy of a, further on
    promoted.stop()

    broker.start()
    broker.send("orders", "filler")
    assert send_timed(broker, "c", due) == x_at
    assert send_timed(broker, "a", due) == b_at != a_there
    await timer.tick_at(now)
    assert timer.scheduler.store.stats().pending == 2

    broker.stop()  # the failover: the broker name's master is now the other log
    promoted.start()
    try:
        timer.scheduler.checkpoint_interval_ms = timer.scheduler.keeper.interval_ms = 10**9  # no checkpoint now
        for at in (due + 200, due + 400):
            await timer.tick_at(at)
        assert promoted.bodies("orders") == ["filler", "a"], "b or x was delivered from a's or c's entry"
        assert (timer.scheduler.counters.delivered, timer.scheduler.counters.lost) == (2, 1)
        metrics = promoted.metrics()
        assert (counted(metrics, "relocated"), counted(metrics, "lost")) == (1.0, 1.0)

        # The timer is killed before it checkpoints what it delivered: it delivers it all again, stored once.
        timer.crash_and_restart(tmp_path, nameserver)
        await timer.tick_at(due + 600)
        assert promoted.bodies("orders") == ["filler", "a"]
        assert timer.scheduler.counters.lost == 1
        assert counted(promoted.metrics(), "relocated") == 2.0
    finally:
        promoted.stop()
