"""Epoch histories: where two brokers' logs agree, and a returning master's truncation to it."""

from __future__ import annotations

from pathlib import Path

from libs.store.epochs import EpochFile, consistent_point
from libs.store.replica import read_chunk, truncate_log
from tests.support.clock import FakeClock
from tests.support.store import EVER, make_store, pull_all, record


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


async def test_a_truncated_log_forgets_its_tail_in_queues_and_index_and_takes_the_new_masters(
    tmp_path: Path, clock: FakeClock
) -> None:
    old, new = make_store(tmp_path / "old", clock), make_store(tmp_path / "new", clock)
    for n in range(10):
        outcome = await old.put(record("T", 0, b"shared %d" % n, keys=[f"k{n}"]))
    shared_end = old.commitlog.write_offset
    while chunk := read_chunk(old.commitlog, new.commitlog.write_offset):
        new.replicate(new.commitlog.write_offset, chunk)
    for n in range(5):
        outcome = await old.put(record("T", 0, b"lost %d" % n, keys=[f"lost{n}"]))
    assert outcome.stored
    await old.close()
    for n in range(3):
        await new.put(record("T", 0, b"new %d" % n, keys=[f"new{n}"]))

    reopened = make_store(tmp_path / "old", clock)
    assert truncate_log(reopened, shared_end) > 0
    assert reopened.queue_offsets("T", 0) == (0, 10)
    assert reopened.query_key("T", "lost0", *EVER) == []
    while chunk := read_chunk(new.commitlog, reopened.commitlog.write_offset):
        reopened.replicate(reopened.commitlog.write_offset, chunk)
    bodies = pull_all(reopened, "T", 0)
    assert bodies == [b"shared %d" % n for n in range(10)] + [b"new %d" % n for n in range(3)]
    assert [m.body for m in reopened.query_key("T", "new1", *EVER)] == [b"new 1"]
    await reopened.close()
    await new.close()
