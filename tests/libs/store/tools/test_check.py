"""`petrel store check`: every kind of damage reported exactly, and nothing changed."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest

from libs.codec import CRC_START, encode_record, stamp_record
from libs.message import MessageRecord, tags_code
from libs.store.checkpoint import Checkpoint
from libs.store.message_store import PutResult
from libs.store.tools import dump
from libs.store.tools.check import check_store
from libs.store.tools.shared import Kind, Severity, StoreToolError
from tests.support.store_tools import (
    COUNT,
    SEGMENT,
    T0,
    Store,
    cq,
    crash,
    lines,
    messages,
    open_store,
    run_cli,
    seg,
    snapshot,
    write_store,
)

# ---- a whole store -------------------------------------------------------------------


def test_a_clean_store_checks_clean_with_every_record_and_unit_counted(store: Store) -> None:
    report = check_store(store.root)

    assert report.problems == ()
    assert report.ok
    assert report.clean_stop
    assert (report.segments, report.segment_size, report.records) == (3, SEGMENT, COUNT)
    assert report.blanks == 2  # the first two segments end with a filler
    assert (report.queues, report.units) == (5, COUNT)
    assert (report.log_min, report.log_end) == (0, store.end)
    assert report.checkpoint == Checkpoint(store.end, store.end, int(T0 * 1000))
    assert report.index_files == 1


def test_check_on_the_command_line_prints_the_summary_and_exits_0(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "store", "check", str(store.root))

    assert code == 0
    assert out == [
        f"store {store.root}: closed cleanly",
        f"commitlog: 3 segments of {SEGMENT} bytes, {COUNT} records, 2 blank fillers; "
        f"the log runs from offset 0 to {store.end}",
        f"consumequeue: 5 queues, {COUNT} units",
        f"checkpoint: commitlog offset {store.end}, dispatch {store.end}",
        "index files: 1",
        "result: clean",
    ]


def test_check_changes_nothing_and_creates_no_abort_file(store: Store) -> None:
    store.write(store.end + 10, b"\x07")  # something to report, so every phase runs to the end
    before = snapshot(store.root)

    check_store(store.root, max_problems=0)
    list(dump.records(store.root))

    assert snapshot(store.root) == before
    assert not (store.root / "abort").exists()


# ---- the CommitLog -------------------------------------------------------------------


def test_a_flipped_body_byte_is_a_crc_mismatch_at_the_records_offset(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = store.put("orders", 1, 30)
    raw = bytearray(store.read(victim.physical_offset, victim.size))
    raw[200] ^= 0xFF
    store.write(victim.physical_offset + 200, bytes(raw[200:201]))

    report = check_store(store.root)

    stored, computed = int.from_bytes(raw[8:12], "big"), zlib.crc32(raw[CRC_START:])
    assert lines(report) == [
        f"{seg(victim.physical_offset)} offset {victim.physical_offset}: "
        f"CRC mismatch: stored 0x{stored:08x}, computed 0x{computed:08x}; "
        f"records follow it: `petrel store repair {store.root}` quarantines it and keeps them",
        f"{cq('orders', 1, 30)} unit 30: points at offset {victim.physical_offset}, "
        "whose record is corrupt (CRC mismatch)",
    ]
    assert [p.kind for p in report.problems] == [Kind.CRC_MISMATCH, Kind.CQ_UNIT]
    assert report.records == COUNT - 1
    code, out, _ = run_cli(capsys, "store", "check", str(store.root))
    assert code == 1
    assert out[5:] == ["result: 2 errors, 0 warnings", *(f"ERROR {line}" for line in lines(report))]


def test_after_a_bad_magic_code_the_walk_goes_on_at_the_next_record(store: Store) -> None:
    victim = store.put("orders", 2, 10)
    store.write(victim.physical_offset + 4, bytes.fromhex("deadbeef"))

    report = check_store(store.root)

    assert lines(report)[:2] == [
        f"{seg(victim.physical_offset)} offset {victim.physical_offset}: bad magic code 0xdeadbeef; "
        f"records follow it: `petrel store repair {store.root}` quarantines it and keeps them",
        f"{cq('orders', 2, 10)} unit 10: points at offset {victim.physical_offset}, "
        "where no valid record is (bad magic code 0xdeadbeef)",
    ]
    assert len(report.problems) == 2  # the units of the records after it still point at valid records
    assert report.records == COUNT - 1


def test_a_truncated_segment_is_reported_with_the_record_it_cuts(store: Store) -> None:
    os.truncate(store.root / "commitlog" / "00000000000000000000", 100_000)
    cut = next(p for p in store.puts if p.physical_offset + p.size > 100_000)

    report = check_store(store.root)

    assert lines(report)[:2] == [
        f"commitlog/00000000000000000000: 100000 bytes, but the other segments are {SEGMENT}",
        f"commitlog/00000000000000000000 offset {cut.physical_offset}: record claims {cut.size} bytes, "
        f"only {100_000 - cut.physical_offset} are there (torn write?)",
    ]
    assert [p.kind for p in report.problems][:2] == [Kind.SEGMENT_SIZE, Kind.BAD_LENGTH]
    beyond = next(p for p in store.puts if p.physical_offset >= 100_000 and p.topic == "audit")
    assert (
        f"{cq('audit', 0, beyond.queue_offset)} unit {beyond.queue_offset}: points at offset "
        f"{beyond.physical_offset}, past the end of 00000000000000000000, which is 100000 bytes"
    ) in lines(report)


def test_a_missing_segment_in_the_middle_is_named(store: Store) -> None:
    (store.root / "commitlog" / "00000000000000262144").unlink()
    first_lost = next(p for p in store.puts if p.physical_offset >= SEGMENT and p.topic == "audit")

    report = check_store(store.root)

    assert lines(report)[0] == "commitlog/00000000000000262144: missing: the log jumps from offset 262144 to 524288"
    assert report.problems[0].kind is Kind.SEGMENT_MISSING
    assert Kind.QUEUE_OFFSET_GAP not in {p.kind for p in report.problems}  # the lost records excuse the jumps
    assert (
        f"{cq('audit', 0, first_lost.queue_offset)} unit {first_lost.queue_offset}: points at offset "
        f"{first_lost.physical_offset}, in segment 00000000000000262144, which is missing"
    ) in lines(report)


def test_garbage_after_the_end_of_a_cleanly_closed_log_is_an_error(store: Store) -> None:
    store.write(store.end + 1000, b"\x01\x02")

    report = check_store(store.root)

    assert lines(report) == [
        f"{seg(store.end)} offset {store.end + 1000}: "
        f"garbage after the end of the log, which ends at offset {store.end}"
    ]
    assert report.problems[0].kind is Kind.GARBAGE
    assert not report.ok


def test_the_first_problem_is_the_earliest_whatever_the_order_of_the_damage(store: Store) -> None:
    late, early = store.put("orders", 3, 100), store.put("orders", 0, 3)
    store.write(late.physical_offset + 300, b"?")
    store.write(early.physical_offset + 300, b"?")
    store.write_unit("orders", 2, 0, (1, 2, 3))

    report = check_store(store.root)

    assert [p.offset for p in report.problems[:2]] == [early.physical_offset, late.physical_offset]
    assert [(p.kind, p.path) for p in report.problems[2:]] == [
        (Kind.CQ_UNIT, cq("orders", 0, 3)),
        (Kind.CQ_UNIT, cq("orders", 2, 0)),
        (Kind.CQ_COUNT, "consumequeue/orders/2"),  # its record 0 lost its unit
        (Kind.CQ_UNIT, cq("orders", 3, 100)),
    ]


def test_max_problems_stops_the_check_early(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    for put in store.puts[:10]:
        store.write(put.physical_offset + 300, b"?")

    report = check_store(store.root, max_problems=3)

    assert [p.offset for p in report.problems] == [p.physical_offset for p in store.puts[:3]]
    assert report.summary_lines()[-1] == "result: 3 errors, 0 warnings (stopped at --max-problems 3)"
    code, out, _ = run_cli(capsys, "store", "check", str(store.root), "--max-problems", "1")
    assert code == 1
    assert [line for line in out if line.startswith("ERROR")] == [f"ERROR {lines(report)[0]}"]


def test_a_queue_offset_out_of_sequence_is_reported_at_both_ends(store: Store) -> None:
    victim, before = store.put("orders", 0, 5), store.put("orders", 0, 4)
    raw = bytearray(store.read(victim.physical_offset, victim.size))
    stamp_record(
        raw,
        0,
        queue_offset=9,
        physical_offset=victim.physical_offset,
        store_timestamp=int(T0 * 1000),
        store_host="127.0.0.1:0",
    )
    store.write(victim.physical_offset, bytes(raw))
    after = store.put("orders", 0, 6)

    report = check_store(store.root)

    assert lines(report) == [
        f"{seg(victim.physical_offset)} offset {victim.physical_offset}: the record of orders/0 has queue offset 9, "
        f"but the one before it, at offset {before.physical_offset}, has 4",
        f"{seg(after.physical_offset)} offset {after.physical_offset}: the record of orders/0 has queue offset 6, "
        f"but the one before it, at offset {victim.physical_offset}, has 9",
        f"{cq('orders', 0, 5)} unit 5: points at offset {victim.physical_offset}, whose record has queue offset 9",
        f"consumequeue/orders/0: 1 of the {sum(p.topic == 'orders' and p.queue_id == 0 for p in store.puts)} "
        f"records of orders/0 from the queue's first unit on have no unit pointing at them, "
        f"the first at offset {victim.physical_offset}",
    ]


# ---- an unclean stop -----------------------------------------------------------------


async def crashed(store: Store, count: int) -> list[PutResult]:
    """Reopen the cleanly closed store, append `count` more records and crash."""
    reopened = open_store(store.root)
    outcome = reopened.append(b"".join(messages(COUNT, count)))
    crash(reopened)
    return outcome.stored


async def test_a_torn_tail_after_a_crash_is_a_warning_that_recovery_truncates_there(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    tail = (await crashed(store, 20))[-1]
    store.write(tail.physical_offset + tail.size - 50, bytes(50))  # the last page never reached the disk

    report = check_store(store.root)

    assert not report.clean_stop
    assert report.ok
    assert [(p.severity, p.kind, p.offset) for p in report.problems] == [
        (Severity.WARNING, Kind.CRC_MISMATCH, tail.physical_offset)
    ]
    assert report.problems[0].detail.endswith(
        "; the store was not closed cleanly, and recovery will truncate the log here"
    )
    assert report.log_end == tail.physical_offset
    code, out, _ = run_cli(capsys, "store", "check", str(store.root))
    assert code == 0
    assert out[-1].startswith(f"WARNING {seg(tail.physical_offset)} offset {tail.physical_offset}: CRC mismatch")
    reopened = open_store(store.root)  # recovery agrees on where the log ends
    assert reopened.commitlog.write_offset == tail.physical_offset
    await reopened.close()


async def test_damage_below_the_checkpoint_is_an_error_even_after_a_crash(store: Store) -> None:
    await crashed(store, 20)
    victim = store.put("audit", 0, 3)
    store.write(victim.physical_offset + 300, b"?")

    report = check_store(store.root)

    assert not report.clean_stop
    assert (report.problems[0].severity, report.problems[0].kind, report.problems[0].offset) == (
        Severity.ERROR,
        Kind.CRC_MISMATCH,
        victim.physical_offset,
    )


async def test_garbage_past_the_end_after_a_crash_is_a_warning_that_recovery_zeroes_it(store: Store) -> None:
    tail = (await crashed(store, 5))[-1]
    end = tail.physical_offset + tail.size
    store.write(end + 64, b"\xff")

    report = check_store(store.root)

    assert lines(report) == [
        f"{seg(end)} offset {end + 64}: garbage after the end of the log, which ends at offset {end}; "
        "the store was not closed cleanly, and recovery will zero it"
    ]
    assert report.ok


async def test_units_a_crash_lost_are_left_to_recovery(store: Store) -> None:
    await crashed(store, 20)

    report = check_store(store.root)

    assert report.problems == ()
    assert report.records == COUNT + 20
    assert report.units == COUNT
    assert report.redispatch_from == store.end


# ---- ConsumeQueues, checkpoint, index ------------------------------------------------


def test_a_unit_pointing_at_another_queues_record_is_named_exactly(store: Store) -> None:
    ours = store.put("orders", 3, 17)
    theirs = store.puts[store.puts.index(ours) + 1]  # between units 16 and 18, as a unit of orders/3 must be
    store.write_unit("orders", 3, 17, (theirs.physical_offset, theirs.size, tags_code("TagA")))

    report = check_store(store.root)

    assert lines(report) == [
        f"{cq('orders', 3, 17)} unit 17: points at offset {theirs.physical_offset} which holds a record of "
        f"{theirs.topic}/{theirs.queue_id}",
        f"consumequeue/orders/3: 1 of the {sum(p.topic == 'orders' and p.queue_id == 3 for p in store.puts)} records "
        f"of orders/3 from the queue's first unit on have no unit pointing at them, "
        f"the first at offset {ours.physical_offset}",
    ]


def test_a_wrong_tags_code_names_the_records_tag(store: Store) -> None:
    put = store.put("audit", 0, 2)
    store.write_unit("audit", 0, 2, (put.physical_offset, put.size, 12345))

    report = check_store(store.root)

    assert lines(report)[0] == (
        f"{cq('audit', 0, 2)} unit 2: tags code 12345, but the record at offset "
        f"{put.physical_offset} has tag 'TagB', code {tags_code('TagB')}"
    )


async def test_a_delay_queues_unit_code_is_the_due_time(tmp_path: Path) -> None:
    due = int(T0 * 1000) + 5000
    properties = {"TIMER_DELIVER_MS": str(due), "TAGS": "TagA", "REAL_TOPIC": "orders"}
    delayed = MessageRecord(topic="SCHEDULE_TOPIC_XXXX", body=b"later", queue_id=2, properties=properties)
    root = tmp_path / "store"
    (put,) = await write_store(root, [encode_record(delayed)])
    assert check_store(root).problems == ()
    store = Store(root, [put])
    store.write_unit("SCHEDULE_TOPIC_XXXX", 2, 0, (put.physical_offset, put.size, tags_code("TagA")))

    report = check_store(root)

    assert lines(report) == [
        f"{cq('SCHEDULE_TOPIC_XXXX', 2, 0)} unit 0: tags code {tags_code('TagA')}, but the record at offset "
        f"{put.physical_offset} has TIMER_DELIVER_MS {due}, code {due}",
        "consumequeue/SCHEDULE_TOPIC_XXXX/2: 1 of the 1 records of SCHEDULE_TOPIC_XXXX/2 from the queue's first "
        "unit on have no unit pointing at them, the first at offset 0",
    ]


def test_a_consumequeue_file_with_a_partial_unit(store: Store) -> None:
    path = store.queue_file("orders", 2, 100)
    with path.open("ab") as f:
        f.write(b"\x00" * 7)
    size = path.stat().st_size

    report = check_store(store.root)

    assert lines(report) == [f"consumequeue/orders/2/{path.name}: {size} bytes: a partial unit of 7 bytes at the end"]
    assert report.problems[0].kind is Kind.CQ_FILE


def test_a_damaged_checkpoint_is_an_error(store: Store) -> None:
    path = store.root / "checkpoint"
    raw = bytearray(path.read_bytes())
    raw[3] ^= 1
    path.write_bytes(bytes(raw))

    report = check_store(store.root)

    stored, computed = int.from_bytes(raw[24:], "big"), zlib.crc32(raw[:24])
    assert lines(report) == [f"checkpoint: CRC mismatch: stored 0x{stored:08x}, computed 0x{computed:08x}"]


def test_a_checkpoint_short_of_the_end_of_a_clean_log_is_an_error(store: Store) -> None:
    middle = store.puts[100].physical_offset
    Checkpoint(middle, middle, int(T0 * 1000)).write(store.root / "checkpoint")

    report = check_store(store.root)

    assert lines(report) == [
        f"checkpoint: the store was closed cleanly at offset {middle}, but the log goes on to {store.end}: "
        "the next start would write over the records there"
    ]


def test_an_index_file_with_a_bad_magic_is_reported(store: Store) -> None:
    (path,) = (store.root / "index").iterdir()
    with path.open("r+b") as f:
        f.seek(40)
        f.write(b"XXXX")

    report = check_store(store.root)

    assert lines(report) == [f"index/{path.name}: magic is b'XXXX', not b'PIDX'"]


async def test_a_deleted_topics_records_are_a_warning(tmp_path: Path) -> None:
    root = tmp_path / "store"
    puts = await write_store(root, messages(0, 30))
    store = open_store(root)
    await store.delete_topic("audit")
    await store.close()

    report = check_store(root)

    assert report.ok
    assert sum(p.topic == "audit" for p in puts) == 3
    assert lines(report) == [
        "consumequeue/audit/0: no ConsumeQueue, but the CommitLog holds 3 records of audit/0; "
        "a deleted topic leaves its records to age out of the CommitLog"
    ]


def test_check_refuses_a_directory_that_is_not_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(StoreToolError, match="is not a store directory"):
        check_store(tmp_path)
    code, out, err = run_cli(capsys, "store", "check", str(tmp_path))
    assert (code, out) == (1, [])
    assert err == f"petrel store check: {tmp_path} is not a store directory: it has no commitlog/ directory\n"
