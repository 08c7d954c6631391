"""Scheduled messages outlive the broker's retention: the timer rolls them back into the CommitLog first."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from libs.message import Prop
from tests.support.serving import ServedApp
from tests.support.timer_service import Broker, Timer
from tests.support.waiting import eventually


@pytest.fixture
def broker_overrides() -> dict[str, object]:
    # 64 KiB segments, and a disk "always" over its limit: the oldest segment goes
    # at every retention tick, unless it holds what the timer still needs.
    return {
        "segment_size": 64 * 1024,
        "disk_max_used_ratio": 0.0001,
        "retention_scan_seconds": 0.05,
        "scheduled_roll_grace_seconds": 3600,
    }


def fill(broker: Broker, count: int) -> None:
    """About 1 KB a message: 57 to a 64 KiB segment; sent 25 to a put."""
    broker.create("filler")
    bodies = [f"{i:04d}" + "f" * 1000 for i in range(count)]
    for start in range(0, count, 25):
        broker.send_all("filler", bodies[start : start + 25])


async def test_disk_pressure_deletes_old_segments_only_after_their_scheduled_messages_are_rolled(
    broker: Broker, timer: Timer
) -> None:
    level = broker.send("orders", "level 3", **{Prop.DELAY_LEVEL: "3"})  # 10 s
    exact = broker.send("orders", "exact", **{Prop.TIMER_DELIVER_MS: str(level["deliver_at"] + 3_600_000)})
    fill(broker, 300)  # five more segments
    now = int(timer.clock.now * 1000)

    async def original_segment_gone() -> bool:
        nonlocal now
        now += 100
        await timer.tick_at(now)
        return broker.commitlog_start > int(exact["physical_offset"])

    await eventually(original_segment_gone, "the segment holding the scheduled messages deleted", timeout=20)
    assert timer.scheduler.keeper.rolled == 2
    assert broker.bodies("orders") == []
    await timer.tick_at(level["deliver_at"] + 200)
    await timer.tick_at(level["deliver_at"] + 400)
    assert broker.bodies("orders") == ["level 3"]
    await timer.tick_at(exact["deliver_at"] + 200)
    await timer.tick_at(exact["deliver_at"] + 400)

    assert broker.bodies("orders") == ["level 3", "exact"]
    assert broker.events("delay_lost") == []
    assert timer.emitted("delay_failed") == []


async def test_a_scheduled_message_disk_pressure_takes_before_its_roll_is_reported_lost(
    broker: Broker, broker_overrides: dict[str, object]
) -> None:
    broker.restart(**broker_overrides | {"scheduled_roll_grace_seconds": 0})  # no timer rolls it in time
    doomed = broker.send("orders", "doomed", **{Prop.DELAY_LEVEL: "18"})  # 2 h
    fill(broker, 120)

    async def original_segment_gone() -> bool:
        return broker.commitlog_start > int(doomed["physical_offset"])

    await eventually(original_segment_gone, "the segment holding the scheduled message deleted", timeout=20)

    async def reported() -> bool:
        return len(broker.events("delay_lost")) == 1

    await eventually(reported, "the loss reported", timeout=5)
    (lost,) = broker.events("delay_lost")
    assert (lost["message_id"], lost["topic"], lost["deliver_at"]) == ("ID-doomed", "orders", doomed["deliver_at"])
    assert "petrel_broker_scheduled_lost_total 1.0" in broker.metrics()
    # What is gone keeps nothing: a timer still holding it does not hold retention back.
    advice = broker.report(levels={"17": 0}, timer=0, wheel_offset=doomed["physical_offset"])
    assert advice["needed_offset"] is None
    assert advice["log_start"] == broker.commitlog_start


async def test_a_timer_killed_between_a_roll_and_its_checkpoint_still_delivers_the_message(
    tmp_path: Path, nameserver: ServedApp, broker: Broker, timer: Timer
) -> None:
    exact = broker.send("orders", "exact", **{Prop.TIMER_DELIVER_MS: str(int(time.time() * 1000) + 60_000)})
    fill(broker, 300)
    now = int(timer.clock.now * 1000)

    async def rolled() -> bool:
        nonlocal now
        now += 100
        await timer.tick_at(now)
        return timer.scheduler.keeper.rolled == 1

    await eventually(rolled, "the scheduled message rolled", timeout=20)
    timer.crash_and_restart(tmp_path, nameserver)  # the roll's checkpoint never happened
    for at in (now + 100, exact["deliver_at"] + 200, exact["deliver_at"] + 400):
        await timer.tick_at(at)

    # The original and its rolled copy are both delivered; the copy's delivery is the same one (DEDUP token).
    assert broker.bodies("orders") == ["exact"], "the message was lost, or delivered twice"
    assert broker.events("delay_lost") == []
