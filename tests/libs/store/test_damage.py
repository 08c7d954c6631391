"""Damage in the middle of the CommitLog: never cut away with the records after it; found, repaired, kept.

A torn tail (nothing of the log after it) is still cut by recovery (tests/libs/store/test_recovery.py).
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest

from libs.store.message_store import MessageStore, PutResult
from libs.store.recovery import DamagedLog
from tests.support.clock import FakeClock
from tests.support.store import Stores, pull_all, record, stored, write_at
from tests.support.store_tools import run_cli

COUNT = 120  # two queues; with 64 KiB segments, the log spans two segments


def fingerprint(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((root / "commitlog").iterdir())}


async def written(stores: Stores, clock: FakeClock, *, checkpoint_after: int) -> list[PutResult]:
    """COUNT messages m0.. over queues 0 and 1, a checkpoint after the first `checkpoint_after`, then a crash."""
    store = stores.open()
    results = []
    for i in range(COUNT):
        if i == checkpoint_after:
            clock.advance(store.config.checkpoint_interval_ms / 1000)
            await store.flusher.flush()
        results += stored(await store.put(record("T", i % 2, f"m{i}".encode() + bytes(700))))
    stores.crash(store)
    return results


def damage(stores: Stores, victim: PutResult, how: str) -> None:
    offset = victim.physical_offset
    if how == "flipped body bit":
        write_at(stores.config(), offset + 150, b"\x01")
    elif how == "bad magic":
        write_at(stores.config(), offset + 4, bytes.fromhex("deadbeef"))
    else:  # an impossible length
        write_at(stores.config(), offset, struct.pack(">i", 0x7FFF_FFFF))


def bodies_of(store: MessageStore, queue_id: int) -> list[bytes]:
    return [body[: body.index(b"\0")] for body in pull_all(store, "T", queue_id)]


@pytest.mark.parametrize("how", ["flipped body bit", "bad magic", "impossible length"])
async def test_damage_followed_by_records_stops_the_start_and_changes_nothing(
    stores: Stores, clock: FakeClock, how: str
) -> None:
    results = await written(stores, clock, checkpoint_after=20)
    victim = results[50]
    damage(stores, victim, how)
    before = fingerprint(stores.root)

    with pytest.raises(DamagedLog) as refused:
        stores.open()

    segment = stores.config().commitlog_dir / f"{victim.physical_offset - victim.physical_offset % 65536:020d}"
    message = str(refused.value)
    assert message.startswith(f"CommitLog segment {segment} has a damaged record at offset {victim.physical_offset} (")
    assert f"records of the log follow it from offset {results[51].physical_offset}" in message
    assert f"run `petrel store repair {stores.root}`" in message
    assert fingerprint(stores.root) == before  # not a byte cut, zeroed or deleted


@pytest.mark.parametrize("how", ["flipped body bit", "impossible length"])
async def test_after_a_repair_every_record_after_the_damage_is_kept_at_its_offset(
    stores: Stores, clock: FakeClock, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    results = await written(stores, clock, checkpoint_after=20)
    victim = results[50]
    original = (stores.config().commitlog_dir / f"{0:020d}").read_bytes()[
        victim.physical_offset : victim.physical_offset + victim.size
    ]
    damage(stores, victim, how)
    damaged = (stores.config().commitlog_dir / f"{0:020d}").read_bytes()[
        victim.physical_offset : victim.physical_offset + victim.size
    ]
    assert damaged != original

    code, out, _ = run_cli(capsys, "store", "check", str(stores.root))
    assert code == 1
    assert f"ERROR commitlog/00000000000000000000 offset {victim.physical_offset}: " in "\n".join(out)

    code, out, _ = run_cli(capsys, "store", "repair", str(stores.root))
    assert code == 0
    assert out[0].startswith(
        f"quarantined {victim.size} bytes at offset {victim.physical_offset} of commitlog/00000000000000000000 ("
    )
    assert (stores.root / "quarantine" / f"{victim.physical_offset:020d}").read_bytes() == damaged
    code, out, _ = run_cli(capsys, "store", "repair", str(stores.root))
    assert out == ["nothing to repair"]  # a second run changes nothing
    code, out, _ = run_cli(capsys, "store", "check", str(stores.root))
    assert code == 0, out
    code, out, _ = run_cli(capsys, "store", "dump", str(stores.root), "--topic", "T", "--queue", str(victim.queue_id))
    assert (code, len(out)) == (0, COUNT // 2 - 1)  # dump passes over the quarantine filler

    store = stores.open()
    lost = victim.queue_id
    assert store.queue_offsets("T", lost) == (0, COUNT // 2)  # later messages keep their queue offsets
    assert bodies_of(store, lost) == [f"m{i}".encode() for i in range(lost, COUNT, 2) if i != 50]
    assert bodies_of(store, 1 - lost) == [f"m{i}".encode() for i in range(1 - lost, COUNT, 2)]
    store.start()
    [new] = stored(await store.put(record("T", lost, b"after the repair\0")))
    assert new.queue_offset == COUNT // 2
    assert bodies_of(store, lost)[-1] == b"after the repair"
    await stores.close(store)
    code, out, _ = run_cli(capsys, "store", "check", str(stores.root))
    assert (code, out[-1]) == (0, "result: clean")
    assert ", 1 quarantined record; " in out[1]


async def test_a_repaired_record_below_the_checkpoint_is_skipped_by_readers(
    stores: Stores, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    results = await written(stores, clock, checkpoint_after=100)  # its unit is in the ConsumeQueue already
    victim = results[30]
    damage(stores, victim, "flipped body bit")

    code, _, _ = run_cli(capsys, "store", "repair", str(stores.root))
    assert code == 0
    store = stores.open()
    assert store.queue_offsets("T", 0) == (0, COUNT // 2)
    assert bodies_of(store, 0) == [f"m{i}".encode() for i in range(0, COUNT, 2) if i != 30]
    passed_over = store.pull("T", 0, 15, 1)  # unit 15 points at the quarantine filler
    assert (len(passed_over.records), passed_over.next_offset) == (1, 17)


async def test_a_torn_tail_is_still_cut(stores: Stores, clock: FakeClock) -> None:
    results = await written(stores, clock, checkpoint_after=20)
    last = results[-1]
    write_at(stores.config(), last.physical_offset + 100, bytes(last.size - 100))

    store = stores.open()
    assert store.commitlog.write_offset == last.physical_offset
    assert store.queue_offsets("T", 1) == (0, COUNT // 2 - 1)
