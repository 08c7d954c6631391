"""Private files: secrets at rest are readable by their owner only, whatever the umask."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from libs.metadata_db import SQLITE_SIBLINGS
from libs.private_files import ensure_private, write_private
from libs.producer_groups import ProducerGroupStore, open_metadata_engine
from libs.webhooks import new_secret
from services.broker.consumer_mirror import RECEIPT_KEY_FILE, receipt_key


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def open_umask() -> Iterator[None]:
    """umask 0: a file made with the default mode would be readable and writable by everyone."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def test_a_written_secret_is_0600_in_a_new_0700_folder_and_replaces_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "cluster.token"
    write_private(path, b"first")
    write_private(path, b"second")

    assert (path.read_bytes(), mode(path), mode(path.parent)) == (b"second", 0o600, 0o700)
    assert [p.name for p in path.parent.iterdir()] == ["cluster.token"], "a temporary file was left behind"


def test_a_replaced_file_that_was_open_to_all_is_0600_afterwards(tmp_path: Path) -> None:
    path = tmp_path / "receipt.key"
    path.write_bytes(b"old")
    path.chmod(0o666)
    write_private(path, b"new")
    assert mode(path) == 0o600


def test_ensure_private_creates_an_empty_0600_file_and_leaves_an_existing_one_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    ensure_private(path)
    assert (path.read_bytes(), mode(path)) == (b"", 0o600)
    path.write_bytes(b"tables")
    ensure_private(path)
    assert path.read_bytes() == b"tables"


def test_a_secret_file_open_to_others_is_narrowed_with_a_warning_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "metadata.db"
    path.write_bytes(b"tables")
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="libs.private_files"):
        ensure_private(path)
    assert mode(path) == 0o600
    assert f"{path} was readable by other users (mode 644): narrowed to 600" in caplog.text


def test_ensure_private_without_create_makes_nothing(tmp_path: Path) -> None:
    ensure_private(tmp_path / "metadata.db-wal", create=False)
    assert not (tmp_path / "metadata.db-wal").exists()


def test_the_metadata_database_and_its_wal_files_are_0600(tmp_path: Path) -> None:
    path = tmp_path / "data" / "metadata.db"
    engine = open_metadata_engine(f"sqlite:///{path}")
    try:
        ProducerGroupStore(engine).put("shop", "http://127.0.0.1:9000/checkback", new_secret())
        with engine.connect() as connection:  # holds the database open: its -wal and -shm files exist
            connection.execute(text("SELECT 1"))
            siblings = [path.with_name(path.name + suffix) for suffix in SQLITE_SIBLINGS]
            made = [p for p in siblings if p.exists()]
            assert {p.name for p in made} >= {"metadata.db-wal", "metadata.db-shm"}
            assert {p.name: mode(p) for p in [path, *made]} == {p.name: 0o600 for p in [path, *made]}
    finally:
        engine.dispose()
    assert mode(path.parent) == 0o700


def test_a_metadata_database_left_open_to_all_is_narrowed_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "metadata.db"
    open_metadata_engine(f"sqlite:///{path}").dispose()
    wal = path.with_name("metadata.db-wal")
    wal.write_bytes(b"")
    for file in (path, wal):
        file.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="libs.private_files"):
        engine = open_metadata_engine(f"sqlite:///{path}")
    try:
        assert (mode(path), mode(wal)) == (0o600, 0o600)
    finally:
        engine.dispose()  # SQLite removes the -wal file with its last connection
    assert f"{path} was readable by other users" in caplog.text
    assert f"{wal} was readable by other users" in caplog.text


def test_the_receipt_key_is_0600_and_one_left_open_to_all_is_narrowed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = receipt_key(tmp_path)
    path = tmp_path / RECEIPT_KEY_FILE
    assert mode(path) == 0o600
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="libs.private_files"):
        assert receipt_key(tmp_path) == key
    assert mode(path) == 0o600
    assert f"{path} was readable by other users" in caplog.text
