"""Fixtures for the offline store tools' tests (check, dump, repair)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.store_tools import Store, written_store


@pytest.fixture
async def store(tmp_path: Path) -> Store:
    """For the store tools' tests: a cleanly closed store of real records."""
    return await written_store(tmp_path)
