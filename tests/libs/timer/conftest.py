"""Fixtures for the TimerStore's tests: a store in the test's directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from libs.timer import TimerStore
from tests.support.timer_store import SMALL, T0, StoreFactory


@pytest.fixture
def open_store(tmp_path: Path) -> StoreFactory:
    """Open a store in tmp_path (small geometry unless overridden)."""

    def factory(now_ms: int = T0, **overrides: Any) -> TimerStore:
        return TimerStore(tmp_path / "timer", now_ms=now_ms, **{**SMALL, **overrides})

    return factory
