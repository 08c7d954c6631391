"""Batch lines (libs.events.contract: the events of one call in one line) read as the events they hold: a day
written in either form gives the same rows, and a bad event of a batch line is quarantined alone."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from libs.events import EventWriter
from services.etl.events import read_event_log
from services.etl.job import tables
from tests.support.clock import FakeClock
from tests.support.event_files import DAY, at, batched, write_lines, write_november_22

D = date.fromisoformat(DAY)
END_OF_DAY = at("2026-11-23 00:00")


def test_the_stories_written_as_batch_lines_give_every_table_row_for_row_as_plain_lines(
    spark: SparkSession, tmp_path: Path
) -> None:
    write_november_22(tmp_path / "plain")
    write_november_22(tmp_path / "batched", form=batched)
    plain = read_event_log(spark, (tmp_path / "plain").as_uri(), D, 1)
    batch = read_event_log(spark, (tmp_path / "batched").as_uri(), D, 1)
    try:
        expected, got = tables(spark, plain, now_ms=END_OF_DAY), tables(spark, batch, now_ms=END_OF_DAY)
        for name in expected:
            assertDataFrameEqual(_in_root(got[name]()), _in_root(expected[name]()))
    finally:
        plain.release()
        batch.release()


def test_a_batch_the_writer_wrote_is_read_as_the_events_it_wrote_one_by_one(
    spark: SparkSession, tmp_path: Path
) -> None:
    items = [_acked("m1", 1), _acked("m2", 2, topic="%RETRY%g1", attempt=2)]
    batched_root, plain_root = tmp_path / "batched", tmp_path / "plain"
    clock = FakeClock(at(f"{DAY} 10:00") / 1000)
    batch_writer, plain_writer = (
        EventWriter(batched_root, "broker", clock=clock),
        EventWriter(plain_root, "broker", clock=clock),
    )
    batch_writer.emit_batch("acked", items, broker="broker-a", group="g1")
    for item in items:
        plain_writer.emit("acked", broker="broker-a", group="g1", **item)
    batch_writer.close()
    plain_writer.close()

    batch, plain = (read_event_log(spark, (root / "events").as_uri(), D, 0) for root in (batched_root, plain_root))
    try:
        assert batch.source.count() == 2
        assertDataFrameEqual(batch.window, plain.window)
    finally:
        batch.release()
        plain.release()


def test_a_bad_event_of_a_batch_line_is_quarantined_alone_with_its_line(spark: SparkSession, tmp_path: Path) -> None:
    good, bad = _acked("m1", 1), {k: v for k, v in _acked("m2", 2).items() if k != "queue_offset"}
    raw = json.dumps(
        {"ts": at(f"{DAY} 10:00"), "event": "acked", "service": "broker", "pid": 7, "broker": "b", "group": "g1"}
        | {"batch": [good, bad]}
    )
    write_lines(tmp_path, [raw], folder=(DAY, "10"))

    log = read_event_log(spark, tmp_path.as_uri(), D, 0)
    try:
        assert [r.message_id for r in log.events.collect()] == ["m1"]
        assert [(r.raw, r.reason, r.detail) for r in log.quarantine.collect()] == [
            (raw, "missing_field", "missing queue_offset; batch item 1")
        ]
        assert log.lines.count() == 2, "lines read counts each event of a batch line"
    finally:
        log.release()


def _in_root(rows: DataFrame) -> DataFrame:
    """The quarantine's files, as paths under their events root (the two roots differ)."""
    if "source_file" not in rows.columns:
        return rows
    return rows.withColumn("source_file", F.regexp_extract("source_file", r"dt=.*$", 0))


def _acked(message_id: str, offset: int, *, topic: str = "orders", attempt: int = 1) -> dict[str, Any]:
    return {
        "message_id": message_id,
        "topic": topic,
        "queue_id": 0,
        "queue_offset": offset,
        "delivery_attempt": attempt,
    }
