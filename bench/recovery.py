"""Recovery after kill -9, measured on real processes.

`python -m bench.recovery fill ROOT BYTES SEGMENT PAST` fills a store with
1 KiB records (ASYNC_FLUSH, flusher running) until its CommitLog holds BYTES,
has the flusher checkpoint them (the round its periodic checkpoint runs), goes
on appending for PAST seconds (under the checkpoint interval, so none of that
is checkpointed), then sends itself SIGKILL. `python -m bench.recovery serve ROOT
SEGMENT` then opens the store (the recovery) and pulls the newest messages of
every queue, and prints how long it took until that pull answered, as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.figures import Figure
from bench.records import BATCH, STORE_HOST, batched, encoded, spread
from libs.store.config import StoreConfig
from libs.store.message_store import MessageStore

QUEUES = spread(1, 8)
TARGET_SECONDS = 5.0


def recovery_figures(root: Path, total_bytes: int, segment_size: int, past_checkpoint: float) -> list[Figure]:
    size = f"{total_bytes // (1024 * 1024)} MiB" if total_bytes < 1024**3 else f"{total_bytes / 1024**3:.0f} GiB"
    at_checkpoint = _recovery_run(root / "at-checkpoint", total_bytes, segment_size, 0.0)
    past = _recovery_run(root / "past-checkpoint", total_bytes, segment_size, past_checkpoint)
    print(
        f"  recovery: {at_checkpoint['records_dispatched']} and {past['records_dispatched']} records re-dispatched; "
        f"open() took {at_checkpoint['open_seconds']:.2f} s and {past['open_seconds']:.2f} s",
        flush=True,
    )
    return [
        Figure(
            f"recovery after kill -9, {size} CommitLog",
            at_checkpoint["seconds"],
            "target 5 s",
            TARGET_SECONDS,
            "s",
            target_ratio=1.0,
            higher_is_better=False,
        ),
        Figure(
            f"  same, killed {past_checkpoint:g} s past a checkpoint",
            past["seconds"],
            "target 5 s",
            TARGET_SECONDS,
            "s",
            higher_is_better=False,
        ),
    ]


def _recovery_run(root: Path, total_bytes: int, segment_size: int, past_checkpoint: float) -> dict[str, Any]:
    me = [sys.executable, "-m", "bench.recovery"]
    try:
        fill = subprocess.run(
            [*me, "fill", str(root), str(total_bytes), str(segment_size), str(past_checkpoint)],
            timeout=900,
            check=False,
        )
        if fill.returncode != -signal.SIGKILL:
            raise RuntimeError(f"the filling process ended with {fill.returncode}, not by SIGKILL")
        serve = subprocess.run(
            [*me, "serve", str(root), str(segment_size)], capture_output=True, text=True, timeout=900, check=False
        )
        if serve.returncode != 0:
            raise RuntimeError(f"recovery failed ({serve.returncode}):\n{serve.stderr}")
        result: dict[str, Any] = json.loads(serve.stdout.strip().splitlines()[-1])
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _store(root: Path, segment_size: int) -> MessageStore:
    return MessageStore(StoreConfig(root=root, segment_size=segment_size), store_host=STORE_HOST)


async def fill(root: Path, total_bytes: int, segment_size: int, past_checkpoint: float) -> None:
    store = _store(root, segment_size)
    store.open()
    store.start()
    pool = batched(encoded(BATCH * 1024, QUEUES))
    appended = 0
    while store.commitlog.write_offset < total_bytes:
        appended = await _append(store, pool, appended)
    await store.flusher.flush(checkpoint=True)  # the round the periodic checkpoint runs, now rather than in <= 5 s
    deadline = time.monotonic() + past_checkpoint
    while time.monotonic() < deadline:
        appended = await _append(store, pool, appended)
    os.kill(os.getpid(), signal.SIGKILL)


async def _append(store: MessageStore, pool: list[bytes], appended: int) -> int:
    outcome = store.append(pool[appended % len(pool)])
    if outcome.failure is not None:
        raise outcome.failure
    await asyncio.sleep(0)
    return appended + 1


def serve(root: Path, segment_size: int) -> dict[str, Any]:
    started = time.perf_counter()
    store = _store(root, segment_size)
    report = store.open()
    opened = time.perf_counter()
    for topic, queue_id in QUEUES:
        _, end = store.queue_offsets(topic, queue_id)
        if not store.pull(topic, queue_id, max(0, end - BATCH), BATCH).records:
            raise RuntimeError(f"{topic}/{queue_id} answered no messages after recovery")
    serving = time.perf_counter()
    asyncio.run(store.close())
    return {
        "seconds": serving - started,
        "open_seconds": opened - started,
        "clean": report.clean,
        "records_dispatched": report.records_dispatched,
        "commitlog_end": report.commitlog_end,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery")
    sub = parser.add_subparsers(dest="step", required=True)
    f = sub.add_parser("fill")
    f.add_argument("root", type=Path)
    f.add_argument("bytes", type=int)
    f.add_argument("segment_size", type=int)
    f.add_argument("past_checkpoint", type=float)
    s = sub.add_parser("serve")
    s.add_argument("root", type=Path)
    s.add_argument("segment_size", type=int)
    args = parser.parse_args(argv)
    if args.step == "fill":
        import uvloop

        uvloop.run(fill(args.root, args.bytes, args.segment_size, args.past_checkpoint))
    else:
        print(json.dumps(serve(args.root, args.segment_size)), flush=True)


if __name__ == "__main__":
    main()
