from __future__ import annotations

import random
import time

from libs.timer import Action, MessageRef
from tests.support.timer_store import T0, StoreFactory


def test_100k_entries_enqueue_and_drain(open_store: StoreFactory) -> None:
    n = 100_000
    store = open_store(window_ms=3_600_000, max_delay_ms=3_600_000, segment_bytes=56 * 131_072)
    rng = random.Random(7)
    delays = [rng.randrange(0, 600_000) for _ in range(n)]
    started = time.perf_counter()
    for i, delay in enumerate(delays):
        store.enqueue(T0 + delay, MessageRef(0, i, 1), T0)
    store.checkpoint()
    enqueued = time.perf_counter()
    entries = store.due(T0 + 600_000)
    store.checkpoint()
    drained = time.perf_counter()
    assert len(entries) == n
    assert all(e.action is Action.DELIVER for e in entries)
    assert [e.due_ms // 100 for e in entries] == sorted(T0 // 100 + d // 100 for d in delays)
    print(
        f"\nTimerStore: {n / (enqueued - started):,.0f} enqueues/s, "
        f"{n / (drained - enqueued):,.0f} due entries/s (100k entries over 6,000 slots)"
    )
    store.close()
