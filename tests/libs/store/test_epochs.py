"""Epoch histories: where two brokers' logs agree, and a returning master's truncation to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from libs.store.epochs import EpochFile, consistent_point
from libs.store.message_store import MessageStore
from libs.store.replica import read_chunk, truncate_log
from tests.support.clock import FakeClock
from tests.support.store import EVER, crash, make_store, pull_all, record


def test_an_old_master_keeps_only_what_it_wrote_before_the_new_epoch_began() -> None:
    # A was master of epoch 1 and wrote to 900; B, its slave, had 600 when it became master at epoch 2.
    assert consistent_point([(1, 0)], 900, [(1, 0), (2, 600)], 1_500) == 600


def test_a_slave_behind_the_new_master_keeps_all_it_has() -> None:
    assert consistent_point([(1, 0)], 400, [(1, 0), (2, 600)], 1_500) == 400


def test_a_slave_that_missed_an_epoch_is_cut_where_the_first_epoch_it_missed_began() -> None:
    # C copied A (epoch 1) to 800; B took over at 600 (epoch 2), then D at 1,000 (epoch 3).
    assert consistent_point([(1, 0)], 800, [(1, 0), (2, 600), (3, 1_000)], 1_200) == 600


def test_the_latest_common_epoch_decides() -> None:
    mine = [(1, 0), (2, 600)]
    assert consistent_point(mine, 1_100, [(1, 0), (2, 600), (3, 1_000)], 1_200) == 1_000


def test_a_broker_without_history_keeps_its_log() -> None:
    assert consistent_point([], 700, [(1, 0), (2, 600)], 1_000) == 700


def test_an_epoch_begins_once_and_the_file_is_read_back(tmp_path: Path) -> None:
    epochs = EpochFile(tmp_path)
    epochs.begin(1, 0)
    epochs.begin(3, 500)
    epochs.begin(2, 900)  # an older epoch than the last: ignored
    assert EpochFile(tmp_path).load().entries == [(1, 0), (3, 500)]
    assert EpochFile(tmp_path).load().last_epoch == 3


async def diverged(tmp_path: Path, clock: FakeClock) -> tuple[MessageStore, int]:
    """An old master (closed, in tmp_path/old) that wrote 5 messages its slave never copied, and the slave, now
    master, that wrote 3 of its own; with the offset where the two logs part."""
    old, new = make_store(tmp_path / "old", clock), make_store(tmp_path / "new", clock)
    for n in range(10):
        await old.put(record("T", 0, b"shared %d" % n, keys=[f"k{n}"]))
    shared_end = old.commitlog.write_offset
    while chunk := read_chunk(old.commitlog, new.commitlog.write_offset):
        new.replicate(new.commitlog.write_offset, chunk)
    for n in range(5):
        assert (await old.put(record("T", 0, b"lost %d" % n, keys=[f"lost{n}"]))).stored
    await old.close()
    for n in range(3):
        await new.put(record("T", 0, b"new %d" % n, keys=[f"new{n}"]))
    return new, shared_end


def catch_up(slave: MessageStore, master: MessageStore) -> None:
    while chunk := read_chunk(master.commitlog, slave.commitlog.write_offset):
        slave.replicate(slave.commitlog.write_offset, chunk)


async def test_a_truncated_log_forgets_its_tail_in_queues_and_index_and_takes_the_new_masters(
    tmp_path: Path, clock: FakeClock
) -> None:
    new, shared_end = await diverged(tmp_path, clock)
    reopened = make_store(tmp_path / "old", clock)
    assert truncate_log(reopened, shared_end) > 0
    assert reopened.queue_offsets("T", 0) == (0, 10)
    assert reopened.query_key("T", "lost0", *EVER) == []
    catch_up(reopened, new)
    bodies = pull_all(reopened, "T", 0)
    assert bodies == [b"shared %d" % n for n in range(10)] + [b"new %d" % n for n in range(3)]
    assert [m.body for m in reopened.query_key("T", "new1", *EVER)] == [b"new 1"]
    await reopened.close()
    await new.close()


async def test_a_broker_killed_in_the_middle_of_a_truncation_recovers_to_the_cut_and_copies_from_there(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    new, shared_end = await diverged(tmp_path, clock)
    reopened = make_store(tmp_path / "old", clock)

    def killed(offset: int) -> None:
        raise OSError("killed here")

    monkeypatch.setattr(reopened.index, "truncate_after", killed)
    with pytest.raises(OSError, match="killed here"):
        truncate_log(reopened, shared_end)
    crash(reopened)

    again = make_store(tmp_path / "old", clock)
    assert again.commitlog.write_offset == shared_end, "recovery stops at the cut, not past it over zeroed bytes"
    assert again.queue_offsets("T", 0) == (0, 10)
    catch_up(again, new)
    assert pull_all(again, "T", 0) == [b"shared %d" % n for n in range(10)] + [b"new %d" % n for n in range(3)]
    await again.close()
    await new.close()
