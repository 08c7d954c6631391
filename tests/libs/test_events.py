"""The lifecycle event writer: JSON lines per UTC hour, buffered so that emit never blocks."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from libs.events import EVENTS, EventWriter
from libs.events.contract import COMMON_FIELDS, events_of
from tests.support.clock import FakeClock
from tests.support.waiting import wait_until

T0 = datetime(2024, 3, 1, 13, 59, 58, 500_000, tzinfo=UTC).timestamp()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def make_writer(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., EventWriter]]:
    made: list[EventWriter] = []

    def make(service: str = "broker", **options: Any) -> EventWriter:
        made.append(EventWriter(tmp_path, service, clock=clock, **options))
        return made[-1]

    yield make
    for writer in made:
        writer.close()  # the writer keeps its current hour's file open


@pytest.fixture
def writer(make_writer: Callable[..., EventWriter]) -> EventWriter:
    return make_writer()


def hour_file(root: Path, day: str, hour: str, service: str = "broker") -> Path:
    return root / "events" / f"dt={day}" / f"hour={hour}" / f"{service}-{os.getpid()}.jsonl"


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def all_event_files(root: Path) -> list[Path]:
    return sorted((root / "events").rglob("*.jsonl"))


def test_flush_writes_one_json_line_per_event_with_the_common_fields(
    tmp_path: Path, writer: EventWriter, clock: FakeClock
) -> None:
    writer.emit("sent", message_id="M1", topic="orders", tag="paid")
    clock.now += 0.25
    writer.emit("stored", message_id="M1", topic="orders", queue_id=0, queue_offset=41, broker="b-0")
    writer.flush()

    lines = read_lines(hour_file(tmp_path, "2024-03-01", "13"))
    common = {"service": "broker", "pid": os.getpid()}
    assert lines == [
        {"ts": 1709301598500, "event": "sent", **common, "message_id": "M1", "topic": "orders", "tag": "paid"},
        {
            "ts": 1709301598750,
            "event": "stored",
            **common,
            "message_id": "M1",
            "topic": "orders",
            "queue_id": 0,
            "queue_offset": 41,
            "broker": "b-0",
        },
    ]
    assert writer.written == 2


def test_events_of_two_utc_hours_go_to_two_files(tmp_path: Path, writer: EventWriter, clock: FakeClock) -> None:
    writer.emit("sent", message_id="before", topic="t")
    clock.now += 2  # 14:00:00.500
    writer.emit("sent", message_id="after", topic="t")
    writer.flush()

    assert all_event_files(tmp_path) == [
        hour_file(tmp_path, "2024-03-01", "13"),
        hour_file(tmp_path, "2024-03-01", "14"),
    ]
    assert [e["message_id"] for e in read_lines(hour_file(tmp_path, "2024-03-01", "13"))] == ["before"]
    assert [e["message_id"] for e in read_lines(hour_file(tmp_path, "2024-03-01", "14"))] == ["after"]


def test_midnight_utc_starts_a_new_day_directory(tmp_path: Path, writer: EventWriter, clock: FakeClock) -> None:
    clock.now = datetime(2024, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    writer.emit("sent", message_id="old-year", topic="t")
    clock.now += 1
    writer.emit("sent", message_id="new-year", topic="t")
    writer.flush()

    assert all_event_files(tmp_path) == [
        hour_file(tmp_path, "2024-12-31", "23"),
        hour_file(tmp_path, "2025-01-01", "00"),
    ]


def test_a_later_flush_appends_to_the_hours_file(tmp_path: Path, writer: EventWriter) -> None:
    writer.emit("sent", message_id="first", topic="t")
    writer.flush()
    writer.emit("sent", message_id="second", topic="t")
    writer.close()

    lines = read_lines(hour_file(tmp_path, "2024-03-01", "13"))
    assert [e["message_id"] for e in lines] == ["first", "second"]


def test_unknown_event_name_is_refused(writer: EventWriter) -> None:
    with pytest.raises(ValueError, match=r"^unknown lifecycle event 'sent_twice'$"):
        writer.emit("sent_twice", message_id="M", topic="t")


def test_missing_required_field_is_refused(writer: EventWriter) -> None:
    expected = "event 'acked': missing ['delivery_attempt', 'group'], not in the contract []"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        writer.emit("acked", message_id="M", topic="t", queue_id=1, queue_offset=2, broker="b")


def test_field_not_in_the_contract_is_refused(writer: EventWriter) -> None:
    expected = "event 'sent': missing [], not in the contract ['colour']"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        writer.emit("sent", message_id="M", topic="t", colour="blau")


def test_refused_events_are_neither_buffered_nor_counted(tmp_path: Path, writer: EventWriter) -> None:
    with pytest.raises(ValueError, match="unknown lifecycle event"):
        writer.emit("nope")
    writer.flush()
    assert (writer.written, writer.dropped, all_event_files(tmp_path)) == (0, 0, [])


@pytest.mark.parametrize("name", sorted(EVENTS))
def test_every_contract_event_is_written_with_its_required_fields_even_when_null(
    tmp_path: Path, writer: EventWriter, name: str
) -> None:
    spec = EVENTS[name]
    writer.emit(name, **dict.fromkeys(spec.required))
    writer.flush()

    [line] = read_lines(hour_file(tmp_path, "2024-03-01", "13"))
    assert set(line) == set(COMMON_FIELDS) | spec.required
    assert all(line[field] is None for field in spec.required)


def test_full_buffer_drops_new_events_and_counts_them(tmp_path: Path, make_writer: Callable[..., EventWriter]) -> None:
    writer = make_writer("gateway", max_buffered=2)
    for n in range(5):
        writer.emit("sent", message_id=f"M{n}", topic="t")
    assert writer.dropped == 3

    writer.flush()
    writer.emit("sent", message_id="after-flush", topic="t")
    writer.flush()

    lines = read_lines(hour_file(tmp_path, "2024-03-01", "13", service="gateway"))
    assert [e["message_id"] for e in lines] == ["M0", "M1", "after-flush"]
    assert (writer.written, writer.dropped) == (3, 3)


def test_close_writes_whatever_is_still_buffered(tmp_path: Path, writer: EventWriter) -> None:
    writer.emit("sent", message_id="M", topic="t")
    writer.close()
    assert [e["message_id"] for e in read_lines(hour_file(tmp_path, "2024-03-01", "13"))] == ["M"]


def test_an_event_with_a_value_json_cannot_hold_loses_no_other_event(tmp_path: Path, writer: EventWriter) -> None:
    writer.emit("sent", message_id="A", topic="t")
    with contextlib.suppress(TypeError, ValueError):  # refusing it at emit would be fine too
        writer.emit("sent", message_id="B", topic="t", size=Decimal("1.5"))
    writer.emit("sent", message_id="C", topic="t")
    writer.close()

    ids = [e["message_id"] for e in read_lines(hour_file(tmp_path, "2024-03-01", "13"))]
    assert [i for i in ids if i != "B"] == ["A", "C"]


def test_started_writer_flushes_in_the_background(tmp_path: Path, make_writer: Callable[..., EventWriter]) -> None:
    writer = make_writer("timer", flush_interval=0.01)
    writer.start()
    writer.emit("delay_fired", message_id="M", topic="t", deliver_at=1, lateness_ms=3)
    wait_until(lambda: writer.written > 0, "the background thread writes the event")
    assert writer.written == 1
    path = hour_file(tmp_path, "2024-03-01", "13", service="timer")
    assert [e["event"] for e in read_lines(path)] == ["delay_fired"]


def test_disabled_writer_checks_the_contract_but_writes_nothing(
    tmp_path: Path, make_writer: Callable[..., EventWriter]
) -> None:
    writer = make_writer(enabled=False)
    writer.start()
    with pytest.raises(ValueError, match=r"^unknown lifecycle event 'sent_twice'$"):
        writer.emit("sent_twice")
    writer.emit("sent", message_id="M", topic="t")
    writer.close()
    assert all_event_files(tmp_path) == []


def test_a_batch_is_one_line_that_reads_back_as_the_events_emit_writes_one_by_one(
    tmp_path: Path, make_writer: Callable[..., EventWriter], clock: FakeClock
) -> None:
    items = [
        {"message_id": "M1", "topic": "orders", "queue_id": 0, "queue_offset": 7, "delivery_attempt": 1},
        {"message_id": "M2", "topic": "%RETRY%g", "queue_id": 0, "queue_offset": 3, "delivery_attempt": 2},
    ]
    batched, plain = make_writer("broker"), make_writer("gateway")
    batched.emit_batch("acked", items, broker="b-0", group="g")
    for item in items:
        plain.emit("acked", broker="b-0", group="g", **item)
    batched.flush()
    plain.flush()

    [line] = read_lines(hour_file(tmp_path, "2024-03-01", "13"))
    assert {k: v for k, v in line.items() if k != "batch"} == {
        "ts": 1709301598500,
        "event": "acked",
        "service": "broker",
        "pid": os.getpid(),
        "broker": "b-0",
        "group": "g",
    }
    one_by_one = read_lines(hour_file(tmp_path, "2024-03-01", "13", service="gateway"))
    assert [{**e, "service": "gateway"} for e in events_of(line)] == one_by_one
    assert events_of(one_by_one[0]) == [one_by_one[0]]


def test_a_batch_of_one_is_a_plain_line(tmp_path: Path, writer: EventWriter) -> None:
    writer.emit_batch("sent", [{"message_id": "M", "size": 3}], topic="t")
    writer.emit_batch("sent", [], topic="t")
    writer.flush()

    lines = read_lines(hour_file(tmp_path, "2024-03-01", "13"))
    assert [{k: v for k, v in e.items() if k not in ("ts", "pid")} for e in lines] == [
        {"event": "sent", "service": "broker", "message_id": "M", "size": 3, "topic": "t"}
    ]


@pytest.mark.parametrize(
    ("items", "shared", "expected"),
    [
        (
            [{"message_id": "A"}, {"size": 1}],
            {"topic": "t"},
            "event 'sent': missing ['message_id'], not in the contract []",
        ),
        (
            [{"message_id": "A"}, {"message_id": "B", "colour": "blau"}],
            {"topic": "t"},
            "event 'sent': missing [], not in the contract ['colour']",
        ),
        (
            [{"message_id": "A", "topic": "u"}],
            {"topic": "t"},
            "event 'sent': ['topic'] given for the batch and for a message",
        ),
    ],
)
def test_a_batch_with_a_message_the_contract_refuses_is_refused_whole(
    tmp_path: Path, writer: EventWriter, items: list[dict[str, Any]], shared: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        writer.emit_batch("sent", items, **shared)
    writer.flush()
    assert (writer.written, all_event_files(tmp_path)) == (0, [])


def test_a_full_buffer_counts_each_event_of_a_dropped_batch(make_writer: Callable[..., EventWriter]) -> None:
    writer = make_writer("gateway", max_buffered=1)
    writer.emit("sent", message_id="M0", topic="t")
    writer.emit_batch("sent", [{"message_id": "M1"}, {"message_id": "M2"}], topic="t")
    assert writer.dropped == 2
