from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from libs.timer import MessageRef, TimerStore

T0 = 1_700_000_000_000  # a fake "now", ms; a multiple of every precision
SMALL = {"precision_ms": 100, "window_ms": 10_000, "max_delay_ms": 60_000, "segment_bytes": 56 * 64}

StoreFactory = Callable[..., TimerStore]


def ref(n: int) -> MessageRef:
    return MessageRef(store_id=n % 3, phy_offset=1000 * n, size=100 + n)


@pytest.fixture
def open_store(tmp_path: Path) -> StoreFactory:
    """Open a store in tmp_path (small geometry unless overridden)."""

    def factory(now_ms: int = T0, **overrides: Any) -> TimerStore:
        return TimerStore(tmp_path / "timer", now_ms=now_ms, **{**SMALL, **overrides})

    return factory
