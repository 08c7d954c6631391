"""Replication in the store: a slave holds its master's CommitLog bytes at the same offsets and reads as it does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from libs.errors import CorruptRecord, OffsetOutOfRange, ReplicaDiverged
from libs.store.message_store import MessageStore
from libs.store.replica import read_chunk
from tests.support.clock import FakeClock
from tests.support.store import EVER, crash, make_store, pull_all, record

BODY = b"m" * 1000
"""About 1.1 KB a record: a 64 KiB segment holds 57 and ends in a blank filler."""


@pytest.fixture
async def pair(tmp_path: Path, clock: FakeClock) -> AsyncIterator[tuple[MessageStore, MessageStore]]:
    master, slave = make_store(tmp_path / "master", clock), make_store(tmp_path / "slave", clock)
    yield master, slave
    await master.close()
    await slave.close()


async def fill(master: MessageStore, count: int, queues: int = 2) -> None:
    for n in range(count):
        await master.put(record("T", n % queues, f"{n:05d}".encode() + BODY, keys=[f"k{n}"], msg_id=f"ID-{n}"))


def copy(master: MessageStore, slave: MessageStore, max_bytes: int = 10_000) -> int:
    """Replicate until the slave's log ends where the master's does; the chunks it took."""
    chunks = 0
    while chunk := read_chunk(master.commitlog, slave.commitlog.write_offset, max_bytes):
        slave.replicate(slave.commitlog.write_offset, chunk)
        chunks += 1
    return chunks


def log_bytes(store: MessageStore) -> bytes:
    log = store.commitlog
    return b"".join(bytes(s.map[: min(s.size, log.write_offset - s.start_offset)]) for s in log.segments)


async def test_a_slave_holds_the_same_bytes_at_the_same_offsets_and_reads_as_its_master(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, slave = pair
    await fill(master, 150)  # three segments, two blank fillers
    assert len(master.commitlog.segments) == 3

    assert copy(master, slave) > 3
    assert slave.commitlog.write_offset == master.commitlog.write_offset
    assert log_bytes(slave) == log_bytes(master)
    for queue_id in (0, 1):
        assert slave.queue_offsets("T", queue_id) == master.queue_offsets("T", queue_id)
        assert pull_all(slave, "T", queue_id) == pull_all(master, "T", queue_id)
    assert [r.body[:5] for r in slave.query_key("T", "k77", *EVER)] == [b"00077"]
    assert slave.query_id("ID-149", *EVER)[0].body[:5] == b"00149"


async def test_chunks_hold_whole_records_and_a_large_record_goes_alone(pair: tuple[MessageStore, MessageStore]) -> None:
    master, slave = pair
    await fill(master, 5)
    size = master.commitlog.write_offset // 5
    assert len(read_chunk(master.commitlog, 0, size * 2 + 10)) == size * 2
    assert len(read_chunk(master.commitlog, 0, 10)) == size
    assert read_chunk(master.commitlog, master.commitlog.write_offset) == b""
    with pytest.raises(OffsetOutOfRange):
        read_chunk(master.commitlog, master.commitlog.write_offset + 4096)
    assert copy(master, slave, max_bytes=1) == 5


async def test_a_damaged_chunk_is_refused_and_leaves_nothing_behind(pair: tuple[MessageStore, MessageStore]) -> None:
    master, slave = pair
    await fill(master, 3)
    chunk = bytearray(read_chunk(master.commitlog, 0))
    chunk[-10] ^= 0xFF  # the last record's body, flipped on its way

    with pytest.raises(CorruptRecord):
        slave.replicate(0, bytes(chunk))
    assert slave.commitlog.write_offset == 0
    assert slave.queue_offsets("T", 0) == (0, 0)
    copy(master, slave)
    assert pull_all(slave, "T", 0) == pull_all(master, "T", 0)


async def test_a_chunk_for_another_offset_is_refused(pair: tuple[MessageStore, MessageStore]) -> None:
    master, slave = pair
    await fill(master, 4)
    first = read_chunk(master.commitlog, 0, 1)
    with pytest.raises(ReplicaDiverged, match=f"starts at {len(first)}, this log ends at 0"):
        slave.replicate(len(first), read_chunk(master.commitlog, len(first), 1))
    slave.replicate(0, first)
    with pytest.raises(ReplicaDiverged):
        slave.replicate(0, first)  # twice: the slave's log has moved on
    assert pull_all(slave, "T", 0) == pull_all(master, "T", 0)[:1]


async def test_a_slave_killed_mid_replication_recovers_and_resumes_from_its_end(
    tmp_path: Path, clock: FakeClock
) -> None:
    master, slave = make_store(tmp_path / "master", clock), make_store(tmp_path / "slave", clock)
    await fill(master, 100)
    while slave.commitlog.write_offset < master.commitlog.write_offset // 2:
        slave.replicate(slave.commitlog.write_offset, read_chunk(master.commitlog, slave.commitlog.write_offset, 5000))
    crash(slave)

    slave = make_store(tmp_path / "slave", clock)
    try:
        assert 0 < slave.commitlog.write_offset < master.commitlog.write_offset
        copy(master, slave)
        assert log_bytes(slave) == log_bytes(master)
        assert pull_all(slave, "T", 1) == pull_all(master, "T", 1)
    finally:
        await slave.close()
        await master.close()
