"""Recovery: after kill -9, a torn tail or a damaged checkpoint, the store comes back whole and consistent."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from libs.codec import decode_record
from libs.errors import OffsetOutOfRange
from libs.store.checkpoint import Checkpoint
from libs.store.config import FlushMode
from libs.store.index_file import ENTRY, HEADER_SIZE, SLOT
from libs.store.message_store import MessageStore
from tests.support.clock import FakeClock
from tests.support.store import EVER, Stores, pull_all, record, stored, write_at

REPO = Path(__file__).resolve().parents[3]

KILLED_WRITER = """
import asyncio, os, signal, sys
from pathlib import Path
from libs.codec import encode_record
from libs.message import MessageRecord
from libs.store.config import FlushMode, StoreConfig
from libs.store.message_store import MessageStore

async def main(root: str, count: int) -> None:
    config = StoreConfig(
        Path(root), segment_size=65536, index_slot_count=1024, index_max_entries=100_000,
        cq_units_per_file=50, flush_mode=FlushMode.SYNC_FLUSH,
    )
    store = MessageStore(config)
    store.open()
    store.start()
    for i in range(count):
        body = f"message {i} ".encode() + b"x" * (i * 37 % 400)
        raw = encode_record(MessageRecord(topic="T", body=body, queue_id=i % 3, properties={"KEYS": f"k{i}"}))
        [result] = (await store.put(raw)).stored  # answered: on disk under SYNC_FLUSH
        print(result.queue_id, result.queue_offset, i, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no last flush, no checkpoint

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def body_of(i: int) -> bytes:
    return f"message {i} ".encode() + b"x" * (i * 37 % 400)


def killed_writer(root: Path, count: int) -> dict[tuple[int, int], int]:
    """Run a SYNC_FLUSH writer that is killed after `count` answered puts: {(queue, offset): message number}."""
    done = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(root), str(count)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    acked = {}
    for line in done.stdout.splitlines():
        queue_id, queue_offset, i = map(int, line.split())
        acked[(queue_id, queue_offset)] = i
    assert len(acked) == count
    return acked


@pytest.mark.parametrize("checkpoint", ["as the writer left it", "deleted"])
async def test_every_answered_sync_flush_put_survives_kill_9(stores: Stores, checkpoint: str) -> None:
    acked = killed_writer(stores.root, 300)
    if checkpoint == "deleted":
        stores.config().checkpoint_path.unlink()
    store = stores.open(flush_mode=FlushMode.SYNC_FLUSH)
    assert not stores.report.clean
    for queue_id in range(3):
        expected = [body_of(i) for (q, _), i in sorted(acked.items()) if q == queue_id]
        assert store.queue_offsets("T", queue_id) == (0, len(expected)), f"queue {queue_id}"
        assert pull_all(store, "T", queue_id) == expected, f"queue {queue_id}"
    assert [m.body for m in store.query_key("T", "k299", *EVER)] == [body_of(299)]
    store.start()
    [result] = stored(await store.put(record("T", 0, b"after the crash")))
    assert result.queue_offset == 100


# --- in-process crashes: the files as the page cache had them ------------------------------------


async def put_numbered(store: MessageStore, first: int, count: int, queues: int = 2) -> None:
    for i in range(first, first + count):
        await store.put(record("T", i % queues, f"m{i}".encode(), keys=[f"k{i}"]))


def expected(first: int, count: int, queue_id: int, queues: int = 2) -> list[bytes]:
    return [f"m{i}".encode() for i in range(first, first + count) if i % queues == queue_id]


async def checkpoint_now(store: MessageStore, clock: FakeClock) -> Checkpoint:
    """Flush and write a checkpoint (the fake clock moves past the checkpoint interval)."""
    clock.advance(store.config.checkpoint_interval_ms / 1000)
    await store.flusher.flush()
    written = Checkpoint.read(store.config.checkpoint_path)
    assert written is not None, "the flush wrote no checkpoint"
    assert written.dispatch_offset == store.commitlog.write_offset
    return written


@pytest.mark.parametrize("checkpointed", [0, 40, 190], ids=["no checkpoint", "checkpoint at 40", "checkpoint at 190"])
async def test_a_crash_loses_nothing_the_page_cache_had(stores: Stores, clock: FakeClock, checkpointed: int) -> None:
    store = stores.open()
    await put_numbered(store, 0, checkpointed)
    if checkpointed:
        await checkpoint_now(store, clock)
    await put_numbered(store, checkpointed, 200 - checkpointed)
    if checkpointed:
        await store.flusher.flush()  # units written, no new checkpoint (the fake clock stands still)
    stores.crash(store)

    store = stores.open()
    report = stores.report
    assert (report.clean, report.records_dispatched) == (False, 200 - checkpointed)
    for queue_id in range(2):
        assert store.queue_offsets("T", queue_id) == (0, 100), f"queue {queue_id}"
        assert pull_all(store, "T", queue_id) == expected(0, 200, queue_id), f"queue {queue_id}"
    assert [(r.queue_id, r.queue_offset) for r in stored(await store.put(record("T", 1, b"m200")))] == [(1, 100)]


async def test_a_crash_after_a_checkpoint_of_everything_scans_nothing(stores: Stores, clock: FakeClock) -> None:
    store = stores.open()
    await put_numbered(store, 0, 50)
    written = await checkpoint_now(store, clock)
    stores.crash(store)
    assert store.config.abort_path.exists()

    store = stores.open()
    report = stores.report
    assert (report.clean, report.scanned_from, report.commitlog_end, report.records_dispatched) == (
        False,
        written.commitlog_offset,
        written.commitlog_offset,
        0,
    )
    assert pull_all(store, "T", 0) == expected(0, 50, 0)
    await put_numbered(store, 50, 2)
    assert pull_all(store, "T", 1) == expected(0, 52, 1)
    store = await stores.restart(store)
    assert stores.report.clean
    assert not stores.reports[-2].clean


async def test_crashing_again_right_after_recovery_still_loses_nothing(stores: Stores) -> None:
    store = stores.open()
    await put_numbered(store, 0, 80)
    stores.crash(store)
    stores.crash(stores.open())
    store = stores.open()
    assert not stores.report.clean
    assert pull_all(store, "T", 0) == expected(0, 80, 0)
    assert pull_all(store, "T", 1) == expected(0, 80, 1)


@pytest.mark.parametrize("damage", ["deleted", "bad crc"])
async def test_without_a_valid_checkpoint_the_whole_log_is_scanned(stores: Stores, damage: str) -> None:
    store = stores.open()
    await put_numbered(store, 0, 150)
    end = store.commitlog.write_offset
    await stores.close(store)
    path = store.config.checkpoint_path
    if damage == "deleted":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:-1] + bytes([path.read_bytes()[-1] ^ 0xFF]))

    store = stores.open()
    report = stores.report
    assert (report.clean, report.scanned_from, report.records_dispatched, report.commitlog_end) == (False, 0, 150, end)
    assert pull_all(store, "T", 0) == expected(0, 150, 0)
    await put_numbered(store, 150, 2)
    assert pull_all(store, "T", 1) == expected(0, 152, 1)


# --- torn and corrupt tails ----------------------------------------------------------------------


async def test_half_a_record_after_the_last_one_is_cut_off_and_zeroed(stores: Stores) -> None:
    store = stores.open()
    await put_numbered(store, 0, 30)
    end = store.commitlog.write_offset
    stores.crash(store)
    config = stores.config()
    write_at(config, end, record("T", 0, b"torn " * 100)[:100])

    store = stores.open()
    assert (stores.report.clean, stores.report.commitlog_end, stores.report.records_dispatched) == (False, end, 30)
    assert store.commitlog.read(end, 100) == bytes(100)
    assert pull_all(store, "T", 0) == expected(0, 30, 0)
    [result] = stored(await store.put(record("T", 0, b"next")))
    assert (result.physical_offset, result.queue_offset) == (end, 15)


async def test_a_record_with_a_bad_crc_is_dropped_with_its_queue_unit_and_index_entry(
    stores: Stores, clock: FakeClock
) -> None:
    store = stores.open()
    await put_numbered(store, 0, 40)
    await checkpoint_now(store, clock)
    [lost] = stored(await store.put(record("T", 0, b"lost", keys=["lost-key"])))
    await store.flusher.flush()  # its ConsumeQueue unit is in the file
    stores.crash(store)
    write_at(stores.config(), lost.physical_offset + lost.size - 3, b"\xff")

    store = stores.open()
    assert (stores.report.clean, stores.report.commitlog_end) == (False, lost.physical_offset)
    assert store.queue_offsets("T", 0) == (0, 20)
    assert pull_all(store, "T", 0) == expected(0, 40, 0)
    with pytest.raises(OffsetOutOfRange):
        store.pull("T", 0, 21, 1)
    [replacement] = stored(await store.put(record("T", 0, b"replacement", keys=["new-key"])))
    assert (replacement.physical_offset, replacement.queue_offset) == (lost.physical_offset, 20)
    assert store.query_key("T", "lost-key", *EVER) == []
    assert [m.body for m in store.query_key("T", "new-key", *EVER)] == [b"replacement"]
    assert pull_all(store, "T", 0) == [*expected(0, 40, 0), b"replacement"]


async def test_several_records_after_the_checkpoint_keep_all_but_the_corrupt_last(
    stores: Stores, clock: FakeClock
) -> None:
    store = stores.open()
    await put_numbered(store, 0, 40)
    await checkpoint_now(store, clock)
    await put_numbered(store, 40, 9)
    [lost] = stored(await store.put(record("T", 1, b"lost")))
    await store.flusher.flush()
    stores.crash(store)
    write_at(stores.config(), lost.physical_offset + 50, b"\x00\x01\x02")

    store = stores.open()
    assert (stores.report.commitlog_end, stores.report.records_dispatched) == (lost.physical_offset, 9)
    assert pull_all(store, "T", 0) == expected(0, 49, 0)
    assert pull_all(store, "T", 1) == expected(0, 49, 1)
    assert store.queue_offsets("T", 1) == (0, 24)


async def test_a_queue_whose_last_record_is_gone_forgets_it(stores: Stores, clock: FakeClock) -> None:
    store = stores.open()
    await put_numbered(store, 0, 10)
    await checkpoint_now(store, clock)
    [gone] = stored(await store.put(record("X", 0, b"x0")))
    await store.flusher.flush()  # the unit reached its file, the record will not have
    stores.crash(store)
    write_at(stores.config(), gone.physical_offset, bytes(gone.size))

    store = stores.open()
    assert store.queue_offsets("X", 0) == (0, 0)
    assert store.pull("X", 0, 0, 10).records == []
    [again] = stored(await store.put(record("X", 0, b"x0 again")))
    assert (again.queue_offset, again.physical_offset) == (0, gone.physical_offset)
    assert pull_all(store, "X", 0) == [b"x0 again"]


async def test_a_stale_unit_never_serves_another_queues_message_put_at_its_offset(
    stores: Stores, clock: FakeClock
) -> None:
    store = stores.open()
    await put_numbered(store, 0, 10)
    await checkpoint_now(store, clock)
    [gone] = stored(await store.put(record("X", 0, b"x" * 100)))
    await store.flusher.flush()  # X's unit 0 is in its file
    stores.crash(store)
    write_at(stores.config(), gone.physical_offset + 40, b"\xde\xad")  # X's record is corrupt

    store = stores.open()
    [other] = stored(await store.put(record("Y", 0, b"y" * 100)))  # same size, same place, also queue offset 0
    assert (other.physical_offset, other.queue_offset, other.size) == (gone.physical_offset, 0, gone.size)
    assert [decode_record(raw).topic for raw in store.pull("X", 0, 0, 10).records] == []
    assert store.queue_offsets("X", 0) == (0, 0)


async def test_a_topic_deleted_before_a_crash_stays_deleted(stores: Stores, clock: FakeClock) -> None:
    store = stores.open()
    await put_numbered(store, 0, 20)
    await checkpoint_now(store, clock)
    await put_numbered(store, 20, 4)  # past the checkpoint: recovery dispatches them again
    await store.delete_topic("T")
    stores.crash(store)

    store = stores.open()
    assert [store.queue_offsets("T", queue_id) for queue_id in range(2)] == [(0, 0), (0, 0)]
    [result] = stored(await store.put(record("T", 0, b"new life")))
    assert result.queue_offset == 0
    assert pull_all(store, "T", 0) == [b"new life"]


async def test_a_torn_first_record_of_a_new_segment_takes_the_segment_away(stores: Stores) -> None:
    store = stores.open()
    results = [r for i in range(60) for r in stored(await store.put(record("T", 0, f"{i:04d}".encode() * 250)))]
    rolled = next(r for r in results if r.physical_offset == 65536)
    kept = results[: results.index(rolled)]
    stores.crash(store)
    config = stores.config()
    write_at(config, 65536 + 30, bytes(65536 - 30))  # the first record of the second segment is torn, and the last

    store = stores.open()
    end = kept[-1].physical_offset + kept[-1].size
    assert (stores.report.clean, stores.report.commitlog_end) == (False, end)
    assert [p.name for p in sorted(config.commitlog_dir.iterdir())] == ["00000000000000000000"]
    assert store.queue_offsets("T", 0) == (0, len(kept))
    assert store.commitlog.read(end, 65536 - end) == bytes(65536 - end)  # the blank filler went too
    [result] = stored(await store.put(record("T", 0, b"x" * 2000)))
    assert (result.physical_offset, result.queue_offset) == (65536, len(kept))
    assert len(pull_all(store, "T", 0)) == len(kept) + 1


def unlink_newest_entries(store: MessageStore, count: int) -> None:
    """Set the slots of the newest `count` index entries back, as a process killed before writing them leaves them."""
    newest = store.index.files[-1]
    mapping, slots = newest._map, newest.slot_count
    entries_at = HEADER_SIZE + SLOT.size * slots - ENTRY.size
    for n in range(newest.entry_count, newest.entry_count - count, -1):
        key_hash, _, _, prev = ENTRY.unpack_from(mapping, entries_at + n * ENTRY.size)
        slot_at = HEADER_SIZE + (key_hash % slots) * SLOT.size
        if SLOT.unpack_from(mapping, slot_at)[0] == n:
            SLOT.pack_into(mapping, slot_at, prev)


async def test_index_entries_whose_slots_a_kill_left_unwritten_are_put_again(stores: Stores) -> None:
    """A batch's index entries are written, then the header, then the slots: killed before the slots."""
    store = stores.open()
    await put_numbered(store, 0, 20)
    unlink_newest_entries(store, 20)  # keys k0 to k19, one entry each
    assert store.query_key("T", "k3", *EVER) == []
    stores.crash(store)

    store = stores.open()
    for i in range(20):
        assert [m.body for m in store.query_key("T", f"k{i}", *EVER)] == [f"m{i}".encode()], f"k{i}"
