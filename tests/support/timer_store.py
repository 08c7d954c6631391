"""The TimerStore's tests' tools: a fake now, a small geometry, message references."""

from __future__ import annotations

from collections.abc import Callable

from libs.timer import MessageRef, TimerStore

T0 = 1_700_000_000_000  # a fake "now", ms; a multiple of every precision
SMALL = {"precision_ms": 100, "window_ms": 10_000, "max_delay_ms": 60_000, "segment_bytes": 56 * 64}

StoreFactory = Callable[..., TimerStore]
"""Opens a TimerStore in the test's directory (the `open_store` fixture)."""


def ref(n: int) -> MessageRef:
    return MessageRef(store_id=n % 3, phy_offset=1000 * n, size=100 + n)
