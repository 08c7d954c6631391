"""A drain spread over processes: one window over all of them, each message counted once, the others found."""

from __future__ import annotations

import asyncio
import multiprocessing
from dataclasses import asdict

from bench.drain import Drain, run_consumers
from bench.drain_processes import Shared, SharedProgress, _merged, drain_in_processes

COUNT = 1_000
BATCH = 32


def test_consumers_in_several_processes_drain_every_message_once_in_one_window() -> None:
    next_first = multiprocessing.get_context("fork").Value("q", 0)  # a backlog the forked processes take batches of

    async def consume(progress: SharedProgress, share: int) -> None:
        async def one(_: int) -> None:
            while True:
                with next_first.get_lock():
                    first = next_first.value
                    next_first.value += BATCH
                batch = list(range(first, min(first + BATCH, COUNT)))
                progress.acked(progress.delivered(batch))
                await asyncio.sleep(0)

        await run_consumers(share, one, progress, 30.0)

    drained = drain_in_processes(COUNT, warmup=100, consumers=8, processes=3, consume=consume)

    assert (drained.missing, drained.duplicates, drained.errors) == (0, 0, 0)
    assert drained.consumers == 8
    assert drained.receives >= COUNT // BATCH
    assert 0 < COUNT - drained.measured <= 100 + BATCH  # counted from the end of the warm-up to the last ack
    assert drained.seconds > 0


def test_a_message_two_processes_both_got_is_a_duplicate_and_one_none_got_is_missing() -> None:
    shared = Shared.new(multiprocessing.get_context("fork"))
    one = Drain(count=4, consumers=1, receives=1, delivered=2)
    other = Drain(count=4, consumers=1, receives=2, delivered=2, duplicates=1)

    merged = _merged(4, 2, shared, [(asdict(one), {0, 1}), (asdict(other), {1, 2})])

    assert (merged.duplicates, merged.missing, merged.receives, merged.delivered) == (2, 1, 3, 4)
