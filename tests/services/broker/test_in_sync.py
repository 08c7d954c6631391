"""The in-sync set: who a SYNC_MASTER's writes wait for, when a slave joins it, and when it leaves."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from libs.errors import ReplicationTimeout
from libs.events.writer import EventWriter
from services.broker.in_sync import InSyncReplicas
from tests.support.clock import FakeClock

LAG_MAX = 10.0


def replicas(
    tmp_path: Path, timeout: float = 0.05, clock: FakeClock | None = None, answered: int | None = 0
) -> InSyncReplicas:
    """A master's in-sync set; `answered`: a SYNC_MASTER's high watermark at start, None: an ASYNC_MASTER's."""
    in_sync = InSyncReplicas(
        "broker-a", timeout, EventWriter(tmp_path / "export", "broker", enabled=False), clock or FakeClock(), LAG_MAX
    )
    in_sync.answered = answered
    return in_sync


async def test_a_slave_joins_only_once_it_has_every_write_already_answered(tmp_path: Path) -> None:
    clock = FakeClock()
    in_sync = replicas(tmp_path, clock=clock)
    await in_sync.wait(900)  # no slave in sync: answered at once
    in_sync.acked(1, "s1", 400, master_end=900)
    clock.advance(0.5)
    await in_sync.wait(1200)  # answered at once too: the high watermark is 1200
    in_sync.acked(1, "s1", 950, master_end=1200)  # has the 900 of its last word, not the answered 1200
    assert in_sync.in_sync() == [], "promoted now, it would lose answered writes"
    clock.advance(0.5)
    in_sync.acked(1, "s1", 1200, master_end=1300)  # has all that was answered; 1300 is not answered yet
    assert in_sync.in_sync() == [1]
    waiting = asyncio.ensure_future(in_sync.wait(1300))  # the write in flight now waits for it
    await asyncio.sleep(0)
    assert not waiting.done()
    in_sync.acked(1, "s1", 1300, master_end=1300)
    await asyncio.wait_for(waiting, 1)


async def test_under_async_master_a_slave_joins_once_it_has_the_masters_end(tmp_path: Path) -> None:
    in_sync = replicas(tmp_path, answered=None)  # every write is answered as it is stored
    in_sync.acked(1, "s1", 100, master_end=500)
    in_sync.acked(1, "s1", 550, master_end=900)  # has its last word's 500, not what was answered since
    assert in_sync.in_sync() == []
    in_sync.acked(1, "s1", 900, master_end=900)
    assert in_sync.in_sync() == [1]


@pytest.mark.parametrize("answered", [0, None], ids=["SYNC_MASTER", "ASYNC_MASTER"])
async def test_a_slave_that_keeps_acking_but_stays_behind_leaves_after_the_lag_bound(
    tmp_path: Path, answered: int | None
) -> None:
    clock = FakeClock()
    in_sync = replicas(tmp_path, timeout=3.0, clock=clock, answered=answered)
    in_sync.acked(1, "s1", 100, master_end=100)
    in_sync.acked(2, "s2", 100, master_end=100)
    assert in_sync.in_sync() == [1, 2]
    for t in range(1, 2 * int(LAG_MAX) + 3):  # both ack every second; slave 2 copies half as fast as the master writes
        clock.advance(1.0)
        end = 100 + 100 * t
        in_sync.acked(1, "s1", end - 100, master_end=end)  # a second behind, always
        in_sync.acked(2, "s2", 100 + 50 * t, master_end=end)  # has the master's end of t/2 seconds ago
        await in_sync.drop_lagging(end)
        if t <= 2 * LAG_MAX:
            assert in_sync.in_sync() == [1, 2], f"at {t} s, slave 2 is behind by less than the bound: still in sync"
        else:
            assert in_sync.in_sync() == [1], f"at {t} s, slave 2 has not caught up for more than the bound"


async def test_a_slave_that_has_the_masters_end_of_some_earlier_word_stays_however_long_the_load(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    in_sync = replicas(tmp_path, timeout=3.0, clock=clock, answered=None)
    in_sync.acked(1, "s1", 100, master_end=100)
    for n in range(1, 4 * int(LAG_MAX)):  # its acks trail its stream: each has the end seen two acks before
        clock.advance(0.5)
        in_sync.acked(1, "s1", 100 * n - 100, master_end=100 * n + 100)
    await in_sync.drop_lagging(100 * n + 100)
    assert in_sync.in_sync() == [1], "caught up a second ago, at every word: not lagging"


async def test_a_lagging_slave_leaves_only_once_the_shrink_is_recorded_and_only_then_is_the_write_released(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    in_sync = replicas(tmp_path, timeout=60.0, clock=clock)
    recording = asyncio.Event()
    recorded = asyncio.Event()
    told: list[list[int]] = []

    async def controller(kept: list[int]) -> bool:
        told.append(kept)
        recording.set()
        await recorded.wait()
        return True

    in_sync.confirm = controller
    in_sync.acked(1, "s1", 100, master_end=100)
    waiting = asyncio.ensure_future(in_sync.wait(200))
    for _ in range(int(LAG_MAX) + 1):  # it keeps acking 150 of 200
        clock.advance(1.0)
        in_sync.acked(1, "s1", 150, master_end=200)
    shrinking = asyncio.ensure_future(in_sync.drop_lagging(200))
    await asyncio.wait_for(recording.wait(), 1)
    await asyncio.sleep(0)
    assert not waiting.done(), "released before the controller took the smaller set"
    assert in_sync.in_sync() == [1]
    recorded.set()
    await asyncio.wait_for(shrinking, 1)
    await asyncio.wait_for(waiting, 1)
    assert (told, in_sync.in_sync()) == ([[]], [])


async def test_a_write_waits_for_every_in_sync_slave_and_one_that_does_not_confirm_leaves(tmp_path: Path) -> None:
    in_sync = replicas(tmp_path)
    in_sync.acked(1, "s1", 100, master_end=100)
    in_sync.acked(2, "s2", 100, master_end=100)
    waiting = asyncio.ensure_future(in_sync.wait(200))
    await asyncio.sleep(0)
    in_sync.acked(1, "s1", 200, master_end=200)
    await asyncio.sleep(0)
    assert not waiting.done()  # slave 2 has not said it has it

    await waiting  # slave 2 does not, within the timeout: it leaves, and the write is answered
    assert in_sync.in_sync() == [1]
    await in_sync.wait(200)  # no longer waits for slave 2


async def test_a_slave_that_says_it_has_less_than_before_is_taken_at_its_word(tmp_path: Path) -> None:
    in_sync = replicas(tmp_path, timeout=5.0)
    in_sync.acked(1, "s1", 300, master_end=300)
    in_sync.acked(1, "s1", 250, master_end=300)  # restarted on a log that lost its unflushed tail
    assert in_sync.replicated_to() == 250
    waiting = asyncio.ensure_future(in_sync.wait(300))
    await asyncio.sleep(0)
    assert not waiting.done()
    in_sync.acked(1, "s1", 300, master_end=300)
    await asyncio.wait_for(waiting, 1)


async def test_under_a_controller_a_slave_leaves_only_once_the_controller_took_the_smaller_set(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    in_sync = replicas(tmp_path, timeout=3.0, clock=clock)
    told: list[list[int]] = []
    answers = [False, True]

    async def controller(kept: list[int]) -> bool:
        told.append(kept)
        return answers.pop(0)

    in_sync.confirm = controller
    in_sync.acked(1, "s1", 100, master_end=100)
    in_sync.acked(2, "s2", 100, master_end=100)
    clock.advance(2.0)
    in_sync.acked(1, "s1", 100, master_end=100)
    clock.advance(2.0)  # slave 2 silent for 4 s
    await in_sync.drop_lagging(100)
    assert in_sync.in_sync() == [1, 2], "the controller did not take it: slave 2 stays (it may be promoted)"
    await in_sync.drop_lagging(100)
    assert in_sync.in_sync() == [1]
    assert told == [[1], [1]]


async def test_a_write_that_a_slave_missed_is_not_acknowledged_when_the_controller_cannot_be_told(
    tmp_path: Path,
) -> None:
    in_sync = replicas(tmp_path)

    async def unreachable(kept: list[int]) -> bool:
        return False

    in_sync.confirm = unreachable
    in_sync.acked(1, "s1", 100, master_end=100)
    with pytest.raises(ReplicationTimeout):
        await in_sync.wait(200)
    assert in_sync.in_sync() == [1]


async def test_a_slave_trailing_a_steady_load_by_one_write_joins_as_writes_wait_for_it(tmp_path: Path) -> None:
    """Each word of the slave has the write before the last one answered: without waiting for it, the high
    watermark stays one write ahead of it for good (the nemesis run's slave, not in sync 30 s after a heal)."""
    clock = FakeClock()
    in_sync = replicas(tmp_path, timeout=3.0, clock=clock)
    end = 100
    await in_sync.wait(end)
    in_sync.acked(1, "s1", 0, master_end=end)
    writes = []
    for _ in range(5):
        clock.advance(0.01)
        writes.append(asyncio.ensure_future(in_sync.wait(end + 100)))  # the next write, stored and waiting
        await asyncio.sleep(0)
        in_sync.acked(1, "s1", end, master_end=end + 100)  # has the write before it
        end += 100

    assert in_sync.in_sync() == [1]
    in_sync.acked(1, "s1", end, master_end=end)
    await asyncio.wait_for(asyncio.gather(*writes), 1)
    assert in_sync.answered == end


async def test_a_joining_slave_that_stops_answering_holds_writes_once_for_the_timeout_only(tmp_path: Path) -> None:
    clock = FakeClock()
    in_sync = replicas(tmp_path, timeout=0.05, clock=clock)
    await in_sync.wait(200)
    in_sync.acked(1, "s1", 0, master_end=100)
    in_sync.acked(1, "s1", 100, master_end=200)  # caught up with its earlier word, short of the answered 200: joining

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await in_sync.wait(300)  # waits for it
    await asyncio.wait_for(in_sync.wait(300), 1)  # answered after the timeout, without it: it never joined
    assert in_sync.in_sync() == []
    await asyncio.wait_for(in_sync.wait(400), 0.04)  # and the next write does not wait for it again

    clock.advance(1.0)
    await asyncio.wait_for(in_sync.wait(550), 0.04)
    in_sync.acked(1, "s1", 400, master_end=500)
    in_sync.acked(1, "s1", 500, master_end=600)  # caught up (its last word's 500) since its failed try, short of 550
    await asyncio.wait_for(in_sync.wait(600), 0.04)  # not waited for: a slow slave holds writes once per lag_max
    clock.advance(LAG_MAX)
    await asyncio.wait_for(in_sync.wait(650), 0.04)
    in_sync.acked(1, "s1", 600, master_end=700)  # lag_max after its failed try, caught up: it tries again
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await in_sync.wait(700)
