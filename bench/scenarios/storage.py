"""The storage engine in-process (issue: storage engine).

Appends and ConsumeQueue reads against the least work that writes the same
record format; SYNC_FLUSH against ASYNC_FLUSH under 64 concurrent writers;
10,000 queues against one; recovery after kill -9 against its target. Every
store lives in a temporary directory on the same disk as the broker's data,
deleted when the scenario ends. `BENCH_STORAGE_ONLY=append` runs the first figure
alone (batches of 32 against the bare loop), without the recovery runs.

Page-cache effects (fresh pages of a new file, writeback of the last run's)
make a single run of a few seconds noisy, so ours and the reference run
alternately, `rounds` times each, and the best of each is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.figures import BenchOptions, Figure
from bench.progress import measuring
from bench.records import BATCH, STORE_HOST, QueueKey, batched, encoded, pack_into_map, spread
from bench.recovery import recovery_figures
from libs.store.config import FlushMode, StoreConfig
from libs.store.message_store import MessageStore

WRITERS = 64
MIB = 1024 * 1024
PAIRS = spread(1, 8)
"""the (topic, queue) pairs the appends go to, round-robin"""
ONLY_ENV = "BENCH_STORAGE_ONLY"
"""`append`: the batch append figure alone (ours and the bare loop, the best of the rounds)"""


@dataclass(frozen=True, slots=True)
class Sizes:
    records: int
    """Records per measured append run."""
    warmup: int
    seconds: float
    """Length of each time-bounded run (the concurrent writers)."""
    rounds: int
    recovery_bytes: int
    recovery_segment: int
    past_checkpoint: float
    """Seconds of writes past the last checkpoint in the worst-case recovery run."""


FULL = Sizes(200_000, 10_000, 4.0, 3, 1024 * MIB, 256 * MIB, 4.5)
QUICK = Sizes(30_000, 2_000, 1.5, 1, 128 * MIB, 64 * MIB, 1.0)


class Best(dict[str, float]):
    def keep(self, name: str, value: float) -> None:
        self[name] = max(self.get(name, 0.0), value)


def storage(options: BenchOptions) -> list[Figure]:
    import uvloop

    sizes = QUICK if options.quick else FULL
    os.sync()  # so that writeback left by an earlier scenario does not run during the measurements
    if os.environ.get(ONLY_ENV) == "append":
        return [batch_append_figure(*best_batch_appends(options))]
    with tempfile.TemporaryDirectory(prefix="petrel-bench-store-") as tmp:
        root = Path(tmp)
        figures = uvloop.run(_in_process(root, sizes))
        with measuring("recovery after kill -9"):
            figures += recovery_figures(root, sizes.recovery_bytes, sizes.recovery_segment, sizes.past_checkpoint)
    return figures


def best_batch_appends(options: BenchOptions) -> tuple[float, float]:
    """Only the batch appends and the bare loop (msgs/s, the best of the rounds each), in a temporary directory."""
    import uvloop

    sizes = QUICK if options.quick else FULL
    best = Best()
    records = encoded(sizes.warmup + sizes.records, PAIRS)
    with tempfile.TemporaryDirectory(prefix="petrel-bench-store-") as tmp:
        for n in range(1, sizes.rounds + 1):
            with measuring(f"store appends, round {n}"):
                uvloop.run(_batch_appends(Path(tmp), records, sizes.warmup, best))
    return best["batch"], best["batch reference"]


def batch_append_figure(ours: float, bare_loop: float) -> Figure:
    return Figure(
        "ASYNC_FLUSH append, batches of 32",
        ours,
        "bare loop packing the records into an mmap",
        bare_loop,
        "msg/s",
        target_ratio=0.6,  # issue 29's "at least" (issue 15 asked 0.5)
    )


async def _in_process(root: Path, sizes: Sizes) -> list[Figure]:
    best = Best()
    records = encoded(sizes.warmup + sizes.records, PAIRS)
    wide = encoded(10_000 + sizes.records, spread(100, 100))
    narrow = encoded(10_000 + sizes.records, spread(1, 1))
    for n in range(1, sizes.rounds + 1):
        with measuring(f"appends and reads, round {n}"):
            await _batch_appends(root, records, sizes.warmup, best)
            await _single_appends(root, records, sizes.warmup, best)
        with measuring(f"{WRITERS} writers, round {n}"):
            best.keep("sync", await _writers(root / "sync", FlushMode.SYNC_FLUSH, sizes.seconds))
            best.keep("async", await _writers(root / "async", FlushMode.ASYNC_FLUSH, sizes.seconds))
        with measuring(f"10,000 queues, round {n}"):
            best.keep("wide", await _queue_spread(root / "wide", wide, 10_000))
            best.keep("narrow", await _queue_spread(root / "narrow", narrow, 10_000))
    return [
        batch_append_figure(best["batch"], best["batch reference"]),
        Figure(
            "ASYNC_FLUSH append, one record at a time",
            best["single"],
            "bare mmap loop, one record at a time",
            best["single reference"],
            "msg/s",
        ),
        Figure("ConsumeQueue reads: pull 32 at a time", best["pull"], "target 500k msg/s", 500_000, "msg/s", 1.0),
        Figure(
            f"SYNC_FLUSH put, {WRITERS} concurrent writers",
            best["sync"],
            "ASYNC_FLUSH store, same writers",
            best["async"],
            "msg/s",
            target_ratio=0.5,
        ),
        Figure(
            "append x32 over 10,000 queues", best["wide"], "same records into 1 queue", best["narrow"], "msg/s", 0.8
        ),
    ]


@contextlib.asynccontextmanager
async def _opened(root: Path, mode: FlushMode) -> AsyncIterator[MessageStore]:
    """A fresh store with its flusher running, as the broker runs it; deleted afterwards."""
    store = MessageStore(StoreConfig(root=root, flush_mode=mode), store_host=STORE_HOST)
    store.open()
    store.start()
    try:
        yield store
    finally:
        await store.close()
        shutil.rmtree(root, ignore_errors=True)


async def _append(store: MessageStore, batches: Sequence[bytes]) -> float:
    """Append every batch, yielding to the loop (the flusher) every BATCH records; msgs/s."""
    count = since_yield = 0
    started = time.perf_counter()
    for batch in batches:
        outcome = store.append(batch)
        if outcome.failure is not None:
            raise RuntimeError(f"append failed after {count} records") from outcome.failure
        count += len(outcome.stored)
        since_yield += len(outcome.stored)
        if since_yield >= BATCH:
            since_yield = 0
            await asyncio.sleep(0)
    return count / (time.perf_counter() - started)


async def _batch_appends(root: Path, records: list[bytes], warmup: int, best: Best) -> None:
    """Batches of 32 into a fresh store, pulled back 32 at a time; then the bare loop packing the same batches."""
    warm, timed = records[:warmup], records[warmup:]
    async with _opened(root / "batched", FlushMode.ASYNC_FLUSH) as store:
        await _append(store, batched(warm))
        best.keep("batch", await _append(store, batched(timed)))
        await store.flusher.flush()
        best.keep("pull", _pull_all(store, PAIRS, expected=len(records)))
    best.keep("batch reference", pack_into_map(batched(timed), root))


async def _single_appends(root: Path, records: list[bytes], warmup: int, best: Best) -> None:
    warm, timed = records[:warmup], records[warmup:]
    async with _opened(root / "single", FlushMode.ASYNC_FLUSH) as store:
        await _append(store, batched(warm, 1))
        best.keep("single", await _append(store, batched(timed, 1)))
    best.keep("single reference", pack_into_map(batched(timed, 1), root))


def _pull_all(store: MessageStore, pairs: Sequence[QueueKey], expected: int) -> float:
    """Pull every stored message through the ConsumeQueues, 32 at a time; msgs/s."""
    count = 0
    started = time.perf_counter()
    for topic, queue_id in pairs:
        offset, end = store.queue_offsets(topic, queue_id)
        while offset < end:
            result = store.pull(topic, queue_id, offset, BATCH)
            count += len(result.records)
            offset = result.next_offset
    seconds = time.perf_counter() - started
    if count != expected:
        raise RuntimeError(f"pulled {count} messages, {expected} were stored")
    return count / seconds


async def _writers(root: Path, mode: FlushMode, seconds: float) -> float:
    """WRITERS tasks, each awaiting store.put(one record) in a loop for `seconds`; msgs/s."""
    pool = encoded(8192, spread(1, 8))
    async with _opened(root, mode) as store:
        for record in pool[:256]:
            await store.put(record)
        done = 0
        deadline = time.perf_counter() + seconds

        async def writer(first: int) -> None:
            nonlocal done
            index = first
            while time.perf_counter() < deadline:
                outcome = await store.put(pool[index % len(pool)])
                if outcome.failure is not None:
                    raise RuntimeError(f"{mode} put failed") from outcome.failure
                done += 1
                index += WRITERS

        started = time.perf_counter()
        await asyncio.gather(*(writer(w) for w in range(WRITERS)))
        return done / (time.perf_counter() - started)


async def _queue_spread(root: Path, records: list[bytes], warmup: int) -> float:
    """Append batches of 32 (records round-robin over their queues) once every queue exists."""
    async with _opened(root, FlushMode.ASYNC_FLUSH) as store:
        await _append(store, batched(records[:warmup]))
        await store.flusher.flush(checkpoint=True)
        return await _append(store, batched(records[warmup:]))
