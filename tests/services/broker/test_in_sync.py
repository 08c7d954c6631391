"""The in-sync set: who a SYNC_MASTER's writes wait for, when a slave joins it, and when it leaves."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from libs.errors import ReplicationTimeout
from libs.events.writer import EventWriter
from services.broker.in_sync import InSyncReplicas
from tests.support.clock import FakeClock


def replicas(tmp_path: Path, timeout: float = 0.05) -> InSyncReplicas:
    return InSyncReplicas("broker-a", timeout, EventWriter(tmp_path / "export", "broker", enabled=False))


async def test_a_slave_joins_once_it_has_what_the_master_had_at_its_last_word(tmp_path: Path) -> None:
    in_sync = replicas(tmp_path)
    in_sync.acked(1, "s1", 100, master_end=500)  # behind
    in_sync.acked(1, "s1", 400, master_end=900)  # still behind what the master had at its last word (500)
    assert in_sync.in_sync() == []
    in_sync.acked(1, "s1", 950, master_end=1200)  # has the 900 of its last word: caught up under a steady load
    assert in_sync.in_sync() == [1]


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
    in_sync = InSyncReplicas("broker-a", 3.0, EventWriter(tmp_path / "export", "broker", enabled=False), clock)
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
    await in_sync.drop_silent(100)
    assert in_sync.in_sync() == [1, 2], "the controller did not take it: slave 2 stays (it may be promoted)"
    await in_sync.drop_silent(100)
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
