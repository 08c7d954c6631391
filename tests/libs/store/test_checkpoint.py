"""The checkpoint file: a round trip, and None for anything missing or damaged."""

from __future__ import annotations

from pathlib import Path

import pytest

from libs.store.checkpoint import LAYOUT, Checkpoint


def test_a_written_checkpoint_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    Checkpoint(4096, 2048, 1_700_000_000_000).write(path)
    assert Checkpoint.read(path) == Checkpoint(4096, 2048, 1_700_000_000_000)
    assert path.stat().st_size == LAYOUT.size == 28


def test_a_new_checkpoint_replaces_the_old_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    Checkpoint(1, 1, 1).write(path)
    Checkpoint(2, 2, 2).write(path)
    assert Checkpoint.read(path) == Checkpoint(2, 2, 2)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]


def test_no_checkpoint_reads_as_none(tmp_path: Path) -> None:
    assert Checkpoint.read(tmp_path / "checkpoint") is None


@pytest.mark.parametrize("byte", [0, 9, 17, 26])
def test_a_flipped_byte_reads_as_none(tmp_path: Path, byte: int) -> None:
    path = tmp_path / "checkpoint"
    Checkpoint(4096, 2048, 1_700_000_000_000).write(path)
    raw = bytearray(path.read_bytes())
    raw[byte] ^= 0x01
    path.write_bytes(bytes(raw))
    assert Checkpoint.read(path) is None


@pytest.mark.parametrize("size", [0, 27, 29])
def test_a_checkpoint_of_the_wrong_length_reads_as_none(tmp_path: Path, size: int) -> None:
    path = tmp_path / "checkpoint"
    Checkpoint(4096, 2048, 1).write(path)
    path.write_bytes((path.read_bytes() + b"\x00")[:size])
    assert Checkpoint.read(path) is None
