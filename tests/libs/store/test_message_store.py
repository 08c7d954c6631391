"""MessageStore as a broker uses it: put, pull, filters, queries, clean restarts."""

from __future__ import annotations

import zlib

import pytest

from libs.codec import decode_record
from libs.errors import CorruptRecord, InvalidMessage, OffsetOutOfRange
from libs.filters import compile_filter
from libs.message import Prop
from libs.names import SCHEDULE_TOPIC
from libs.store.message_store import MAX_PULL_BYTES, MAX_UNITS_SCANNED
from tests.support.clock import FakeClock
from tests.support.store import (
    EVER,
    T0_MS,
    Stores,
    bodies,
    pull_all,
    record,
    stored,
)

# --- put and pull ------------------------------------------------------------------------------


async def test_a_put_message_is_pulled_back_at_queue_offset_zero(stores: Stores) -> None:
    store = stores.open()
    [result] = stored(await store.put(record("T", 0, b"hello")))
    pulled = store.pull("T", 0, 0, 10)
    assert bodies(pulled) == [b"hello"]
    assert (pulled.next_offset, pulled.min_offset, pulled.max_offset) == (1, 0, 1)
    assert result.queue_offset == 0


async def test_put_results_say_where_and_when_each_message_was_stored(stores: Stores, clock: FakeClock) -> None:
    store = stores.open()
    first = record("T", 0, b"a", msg_id="ID-1")
    second = record("T", 0, b"b")
    outcome = await store.put(first + second)
    assert outcome.failure is None
    a, b = outcome.stored
    assert (a.topic, a.queue_id, a.queue_offset, a.physical_offset, a.size) == ("T", 0, 0, 0, len(first))
    assert (b.queue_offset, b.physical_offset, b.size) == (1, len(first), len(second))
    assert a.store_timestamp == b.store_timestamp == int(clock() * 1000)
    assert (a.message_id, b.message_id) == ("ID-1", None)
    kept = decode_record(store.read(b.physical_offset))
    assert (kept.body, kept.queue_offset, kept.physical_offset, kept.store_timestamp) == (
        b"b",
        1,
        len(first),
        b.store_timestamp,
    )
    assert kept.store_host == "127.0.0.1:0"


async def test_queue_offsets_are_dense_per_queue_when_topics_and_queues_interleave(stores: Stores) -> None:
    store = stores.open()
    expected: dict[tuple[str, int], list[bytes]] = {}
    for i in range(60):
        topic, queue_id = ("A", "B", "C")[i % 3], i % 2
        body = f"{topic}{queue_id}-{i}".encode()
        [result] = stored(await store.put(record(topic, queue_id, body)))
        assert result.queue_offset == len(expected.setdefault((topic, queue_id), []))
        expected[(topic, queue_id)].append(body)
    for (topic, queue_id), sent in expected.items():
        assert store.queue_offsets(topic, queue_id) == (0, len(sent))
        assert pull_all(store, topic, queue_id) == sent


async def test_a_batch_is_stored_in_order_in_one_call(stores: Stores) -> None:
    store = stores.open()
    batch = b"".join(record("T", i % 2, f"m{i}".encode()) for i in range(10))
    outcome = await store.put(batch)
    assert [(r.queue_id, r.queue_offset) for r in stored(outcome)] == [(i % 2, i // 2) for i in range(10)]
    assert pull_all(store, "T", 0) == [f"m{i}".encode() for i in range(0, 10, 2)]
    assert pull_all(store, "T", 1) == [f"m{i}".encode() for i in range(1, 10, 2)]


async def test_pull_returns_at_most_max_count_and_says_where_to_go_on(stores: Stores) -> None:
    store = stores.open()
    for i in range(7):
        await store.put(record("T", 0, f"m{i}".encode()))
    first = store.pull("T", 0, 0, 3)
    assert (bodies(first), first.next_offset) == ([b"m0", b"m1", b"m2"], 3)
    rest = store.pull("T", 0, first.next_offset, 100)
    assert (bodies(rest), rest.next_offset) == ([b"m3", b"m4", b"m5", b"m6"], 7)


async def test_pull_at_the_end_of_a_queue_is_empty_and_stays_there(stores: Stores) -> None:
    store = stores.open()
    await store.put(record("T", 0, b"only"))
    at_end = store.pull("T", 0, 1, 10)
    assert (at_end.records, at_end.next_offset, at_end.max_offset) == ([], 1, 1)
    never_used = store.pull("T", 5, 0, 10)
    assert (never_used.records, never_used.next_offset, never_used.max_offset) == ([], 0, 0)


@pytest.mark.parametrize("offset", [-1, 3])
async def test_pull_outside_the_queue_is_out_of_range_naming_the_bounds(stores: Stores, offset: int) -> None:
    store = stores.open()
    await store.put(record("T", 0) * 2)
    with pytest.raises(OffsetOutOfRange) as raised:
        store.pull("T", 0, offset, 10)
    assert raised.value.detail == f"offset {offset} of T/0 is outside [0, 2]"
    assert raised.value.extensions == {"min_offset": 0, "max_offset": 2}


async def test_a_record_bigger_than_a_segment_is_refused_and_the_batch_stops_there(stores: Stores) -> None:
    store = stores.open()
    huge = record("T", 0, b"x" * 70_000)
    outcome = await store.put(record("T", 0, b"before") + huge + record("T", 0, b"after"))
    assert [r.queue_offset for r in outcome.stored] == [0]
    assert isinstance(outcome.failure, InvalidMessage)
    assert outcome.failure.detail == f"a {len(huge)}-byte record does not fit in a 65536-byte CommitLog segment"
    assert pull_all(store, "T", 0) == [b"before"]


async def test_a_malformed_record_in_a_batch_fails_the_rest_of_the_batch(stores: Stores) -> None:
    store = stores.open()
    good = record("T", 0, b"good")
    garbage = b"\x00\x00\x00\x20" + b"\x00" * 28
    outcome = await store.put(good + garbage + record("T", 0, b"never tried"))
    assert [r.queue_offset for r in outcome.stored] == [0]
    assert isinstance(outcome.failure, CorruptRecord)
    assert outcome.failure.detail == f"record at offset {len(good)}: bad magic code 0x00000000"
    assert pull_all(store, "T", 0) == [b"good"]


async def test_reading_past_the_end_of_the_log_is_out_of_range(stores: Stores) -> None:
    store = stores.open()
    [result] = stored(await store.put(record()))
    end = result.size
    with pytest.raises(OffsetOutOfRange) as raised:
        store.read(end)
    assert raised.value.detail == f"no record at CommitLog offset {end}; the log ends at {end}"


# --- filters -------------------------------------------------------------------------------------


async def test_a_tag_filter_returns_only_messages_with_those_tags(stores: Stores) -> None:
    store = stores.open()
    tags = ["A", "B", "C", None, "A", "C", "B"]
    for i, tag in enumerate(tags):
        await store.put(record("T", 0, f"{tag}-{i}".encode(), tag=tag))
    pulled = store.pull("T", 0, 0, 10, compile_filter("TAG", "A || B"))
    assert bodies(pulled) == [b"A-0", b"B-1", b"A-4", b"B-6"]
    assert pulled.next_offset == 7


async def test_a_filter_matching_nothing_moves_the_consumer_past_what_it_scanned(stores: Stores) -> None:
    store = stores.open()
    for _ in range(5):
        await store.put(record("T", 0, tag="A"))
    pulled = store.pull("T", 0, 0, 10, compile_filter("TAG", "Z"))
    assert (pulled.records, pulled.next_offset) == ([], 5)


async def test_a_filtered_pull_stops_after_max_count_matches(stores: Stores) -> None:
    store = stores.open()
    for i in range(10):
        await store.put(record("T", 0, f"{i}".encode(), tag="A" if i % 2 else "B"))
    pulled = store.pull("T", 0, 0, 2, compile_filter("TAG", "A"))
    assert (bodies(pulled), pulled.next_offset) == ([b"1", b"3"], 4)


async def test_an_sql92_filter_selects_on_properties(stores: Stores) -> None:
    store = stores.open()
    for a in range(1, 11):
        await store.put(record("T", 0, f"a={a}".encode(), properties={"a": str(a)}))
    await store.put(record("T", 0, b"no a"))
    pulled = store.pull("T", 0, 0, 100, compile_filter("SQL92", "a > 5"))
    assert bodies(pulled) == [f"a={a}".encode() for a in range(6, 11)]
    assert pulled.next_offset == 11


async def test_a_tag_sharing_the_hash_code_of_a_wanted_tag_is_not_delivered(stores: Stores) -> None:
    assert zlib.crc32(b"plumless") == zlib.crc32(b"buckeroo")  # one code in the ConsumeQueue for both
    store = stores.open()
    await store.put(record("T", 0, b"wanted", tag="plumless"))
    await store.put(record("T", 0, b"impostor", tag="buckeroo"))
    pulled = store.pull("T", 0, 0, 10, compile_filter("TAG", "plumless"))
    assert (bodies(pulled), pulled.next_offset) == ([b"wanted"], 2)


async def test_a_filtered_pull_scans_a_bounded_number_of_units(stores: Stores) -> None:
    store = stores.open(segment_size=4 * 1024 * 1024, cq_units_per_file=10_000)
    store.append(record("T", 0, b"", tag="other") * (MAX_UNITS_SCANNED + 10))
    pulled = store.pull("T", 0, 0, 10, compile_filter("TAG", "wanted"))
    assert (pulled.records, pulled.next_offset) == ([], MAX_UNITS_SCANNED)


# --- queries ------------------------------------------------------------------------------------


async def test_messages_are_found_by_key_within_their_topic(stores: Stores) -> None:
    store = stores.open()
    await store.put(record("T", 0, b"first", keys=["order-1", "customer-9"]))
    await store.put(record("T", 1, b"second", keys=["order-1"]))
    await store.put(record("U", 0, b"other topic", keys=["order-1"]))
    found = store.query_key("T", "order-1", *EVER)
    assert [m.body for m in found] == [b"second", b"first"]  # newest first
    assert [m.body for m in store.query_key("T", "customer-9", *EVER)] == [b"first"]
    assert [m.body for m in store.query_key("U", "order-1", *EVER)] == [b"other topic"]
    assert store.query_key("V", "order-1", *EVER) == []
    assert store.query_key("T", "order-2", *EVER) == []


async def test_a_key_query_keeps_to_its_time_range_and_limit(stores: Stores, clock: FakeClock) -> None:
    store = stores.open()
    for i in range(5):
        await store.put(record("T", 0, f"at {i}s".encode(), keys=["k"]))
        clock.advance(1)
    assert [m.body for m in store.query_key("T", "k", T0_MS + 1_000, T0_MS + 3_000)] == [b"at 3s", b"at 2s", b"at 1s"]
    assert [m.body for m in store.query_key("T", "k", T0_MS + 1_500, T0_MS + 2_500)] == [b"at 2s"]
    assert [m.body for m in store.query_key("T", "k", *EVER, limit=2)] == [b"at 4s", b"at 3s"]
    assert store.query_key("T", "k", T0_MS + 10_000, T0_MS + 20_000) == []


async def test_a_message_is_found_by_its_id(stores: Stores) -> None:
    store = stores.open()
    await store.put(record("T", 0, b"one", msg_id="AAAA"))
    await store.put(record("T", 0, b"two", msg_id="BBBB"))
    [found] = store.query_id("BBBB", *EVER)
    assert (found.body, found.message_id, found.queue_offset) == (b"two", "BBBB", 1)
    assert store.query_id("CCCC", *EVER) == []


async def test_offset_for_time_finds_the_first_message_stored_at_or_after(stores: Stores, clock: FakeClock) -> None:
    store = stores.open()
    for _ in range(10):
        await store.put(record("T", 0))
        clock.advance(10)
    assert store.offset_for_time("T", 0, T0_MS - 1) == 0
    assert store.offset_for_time("T", 0, T0_MS) == 0
    assert store.offset_for_time("T", 0, T0_MS + 1) == 1
    assert store.offset_for_time("T", 0, T0_MS + 45_000) == 5
    assert store.offset_for_time("T", 0, T0_MS + 90_000) == 9
    assert store.offset_for_time("T", 0, T0_MS + 90_001) == 10
    assert store.offset_for_time("T", 1, T0_MS) == 0


async def test_listeners_hear_of_each_dispatched_message(stores: Stores) -> None:
    store = stores.open()
    heard: list[tuple[str, int, int, int]] = []
    store.listeners.append(lambda *event: heard.append(event))
    await store.put(record("T", 2, tag="A") + record("T", 2))
    assert heard == [("T", 2, 0, zlib.crc32(b"A")), ("T", 2, 1, 0)]


async def test_a_pull_answers_at_most_about_eight_megabytes(stores: Stores) -> None:
    store = stores.open(segment_size=1024 * 1024)
    body = b"b" * 500_000
    for _ in range(20):
        await store.put(record("T", 0, body))
    pulled = store.pull("T", 0, 0, 100)
    size = len(record("T", 0, body))
    assert len(pulled.records) == -(-MAX_PULL_BYTES // size)  # the one that crosses the limit is the last
    assert pulled.next_offset == len(pulled.records)
    assert len(store.pull("T", 0, pulled.next_offset, 100).records) == 20 - len(pulled.records)


async def test_a_delayed_message_keeps_its_due_time_as_its_unit_code(stores: Stores) -> None:
    store = stores.open()
    heard: list[int] = []
    store.listeners.append(lambda topic, queue_id, offset, code: heard.append(code))
    due = T0_MS + 5_000
    await store.put(record(SCHEDULE_TOPIC, 3, properties={Prop.TIMER_DELIVER_MS: str(due)}, tag="A"))
    assert heard == [due]
    assert store.queues.get(SCHEDULE_TOPIC, 3).read(0, 1)[0][2] == due


# --- segments -------------------------------------------------------------------------------------


async def test_messages_roll_into_new_segments_and_read_across_them(stores: Stores) -> None:
    store = stores.open()
    sent = [f"{i:04d}".encode() * 250 for i in range(200)]  # ~1.1 KB records: 4 segments of 64 KiB
    for body in sent:
        await store.put(record("T", 0, body))
    assert len(store.commitlog.segments) >= 4
    assert pull_all(store, "T", 0) == sent
    assert store.pull("T", 0, 57, 2).records == [store.read(p) for p, _, _ in store.queues.get("T", 0).read(57, 2)]


async def test_segments_are_named_by_their_start_offset_and_end_in_a_blank_filler(stores: Stores) -> None:
    store = stores.open()
    results = [r for _ in range(80) for r in stored(await store.put(record("T", 0, b"x" * 1000)))]
    assert [p.name for p in sorted(store.config.commitlog_dir.iterdir())] == [
        "00000000000000000000",
        "00000000000000065536",
    ]
    first_in_second = next(r for r in results if r.physical_offset >= 65536)
    assert first_in_second.physical_offset == 65536
    last_in_first = results[results.index(first_in_second) - 1]
    filler_at = last_in_first.physical_offset + last_in_first.size
    with pytest.raises(CorruptRecord) as raised:
        store.read(filler_at)
    assert raised.value.detail == f"record at offset {filler_at}: a blank filler, not a message, is at this offset"


# --- clean restart -----------------------------------------------------------------------------


async def test_a_clean_restart_scans_nothing_and_keeps_everything(stores: Stores) -> None:
    store = stores.open()
    for i in range(120):
        await store.put(record("T", i % 3, f"m{i}".encode(), keys=[f"k{i}"], msg_id=f"ID{i}"))
    end = store.commitlog.write_offset
    store = await stores.restart(store)
    report = stores.report
    assert (report.clean, report.records_dispatched, report.commitlog_end, report.bytes_after_end) == (
        True,
        0,
        end,
        0,
    )
    for queue_id in range(3):
        assert pull_all(store, "T", queue_id) == [f"m{i}".encode() for i in range(queue_id, 120, 3)]
    assert [m.body for m in store.query_key("T", "k7", *EVER)] == [b"m7"]
    assert [m.body for m in store.query_id("ID119", *EVER)] == [b"m119"]


async def test_offsets_go_on_densely_after_a_clean_restart(stores: Stores) -> None:
    store = stores.open()
    for i in range(70):
        await store.put(record("T", 0, f"m{i}".encode()))
    end = store.commitlog.write_offset
    store = await stores.restart(store)
    [result] = stored(await store.put(record("T", 0, b"m70")))
    assert (result.queue_offset, result.physical_offset) == (70, end)
    assert pull_all(store, "T", 0) == [f"m{i}".encode() for i in range(71)]


async def test_a_clean_stop_removes_the_abort_file_and_an_open_store_has_one(stores: Stores) -> None:
    store = stores.open()
    assert store.config.abort_path.exists()
    await stores.close(store)
    assert not store.config.abort_path.exists()


async def test_an_empty_store_reopens_empty(stores: Stores) -> None:
    store = stores.open()
    store = await stores.restart(store)
    assert stores.report.clean
    assert store.queue_offsets("T", 0) == (0, 0)
    [result] = stored(await store.put(record("T", 0, b"first")))
    assert (result.queue_offset, result.physical_offset) == (0, 0)


async def test_a_deleted_topic_starts_empty_when_used_again(stores: Stores) -> None:
    store = stores.open()
    for i in range(60):
        await store.put(record("T", 0, f"old {i}".encode()))
    await store.flusher.flush()
    await store.delete_topic("T")
    assert store.queue_offsets("T", 0) == (0, 0)
    [result] = stored(await store.put(record("T", 0, b"new")))
    assert result.queue_offset == 0
    store = await stores.restart(store)
    assert pull_all(store, "T", 0) == [b"new"]
