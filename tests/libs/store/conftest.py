"""Fixtures for the storage engine's tests: a fake clock, stores on a temporary directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.clock import FakeClock
from tests.support.store import Stores


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def stores(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Stores]:
    opened = Stores(tmp_path / "store", clock)
    yield opened
    await opened.close_all()
