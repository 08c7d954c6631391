"""`petrel-commitlog` reads segments the real store wrote: exact rows, a partition per segment, the fillers, damage."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from libs.codec import BLANK_MAGIC, CRC_AT, encode_record, peek_frame
from libs.message import MessageRecord
from libs.store.config import StoreConfig
from libs.store.results import PutResult
from libs.store.tools.repair import repair_store
from services.etl.commitlog_source import COLUMNS, SHORT_NAME, commitlog_daily, register_commitlog_source
from tests.support.clock import FakeClock
from tests.support.store import T0_MS, make_config, make_store, stored, write_at

SEGMENT = 4096
BODY = b"b" * 1000  # records of about 1.2 KB: three to a 4096-byte segment, then a blank filler
UTC = dt.UTC


@dataclass(frozen=True)
class Sent:
    topic: str
    queue_id: int
    tag: str | None
    keys: tuple[str, ...]
    properties: dict[str, str]
    body: bytes


SENT = [
    Sent("orders", 0, "TagA", ("k0", "j0"), {"region": "eu"}, BODY),
    Sent("orders", 1, "TagB", (), {}, BODY + b"1"),
    Sent("audit", 0, None, ("k2",), {}, BODY + b"22"),
    Sent("orders", 0, "TagA", (), {}, BODY + b"333"),
    Sent("audit", 0, "TagC", ("k4",), {"who": "ops"}, BODY + b"4444"),
    Sent("orders", 1, None, (), {}, BODY + b"55555"),
    Sent("orders", 0, "TagA", ("k6",), {}, BODY + b"666666"),
]
"""Seven messages: segments of 3, 3 and 1."""


def properties(i: int, sent: Sent) -> dict[str, str]:
    props = dict(sent.properties) | {"UNIQ_KEY": f"ID{i}"}
    if sent.tag:
        props["TAGS"] = sent.tag
    if sent.keys:
        props["KEYS"] = " ".join(sent.keys)
    return props


def born(i: int) -> int:
    return T0_MS - 500 - i


async def write_store(root: Path, sent: list[Sent], *, step_seconds: float = 1.0) -> list[PutResult]:
    """A store on `root` holding `sent`, one put each, the clock `step_seconds` apart; closed cleanly."""
    clock = FakeClock()
    store = make_store(root, clock, segment_size=SEGMENT)
    results = []
    for i, s in enumerate(sent):
        message = MessageRecord(
            topic=s.topic, body=s.body, queue_id=s.queue_id, properties=properties(i, s), born_timestamp=born(i)
        )
        results += stored(await store.put(encode_record(message)))
        clock.advance(step_seconds)
    await store.flusher.flush()
    await store.close()
    return results


def ms(value: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=value)


def expected(spark: SparkSession, results: list[PutResult], kept: list[int], *, body: bool = False) -> DataFrame:
    """The rows of the messages SENT[i] for i in `kept`, as the store answered their puts."""
    rows = [
        (
            SENT[i].topic,
            SENT[i].queue_id,
            results[i].queue_offset,
            results[i].physical_offset,
            ms(born(i)),
            ms(results[i].store_timestamp),
            SENT[i].tag,
            list(SENT[i].keys),
            properties(i, SENT[i]),
            len(SENT[i].body),
            f"ID{i}",
            *((SENT[i].body,) if body else ()),
        )
        for i in kept
    ]
    return spark.createDataFrame(rows, f"{COLUMNS}, body binary" if body else COLUMNS)


def read(spark: SparkSession, config: StoreConfig, **options: str) -> DataFrame:
    register_commitlog_source(spark)
    return spark.read.format(SHORT_NAME).options(**options).load(str(config.commitlog_dir))


async def test_every_segment_is_a_partition_and_every_message_a_row(spark: SparkSession, tmp_path: Path) -> None:
    results = await write_store(tmp_path, SENT)
    config = make_config(tmp_path, segment_size=SEGMENT)
    assert [r.physical_offset // SEGMENT for r in results] == [0, 0, 0, 1, 1, 1, 2], "records moved"
    segments = sorted(config.commitlog_dir.iterdir())
    ends = [results[i].physical_offset + results[i].size for i in (2, 5)]
    fillers = [peek_frame(path.read_bytes(), end % SEGMENT) for path, end in zip(segments, ends, strict=False)]
    assert fillers == [(SEGMENT - end % SEGMENT, BLANK_MAGIC) for end in ends], "segments should end in fillers"

    frame = read(spark, config)

    assert frame.rdd.getNumPartitions() == len(segments) == 3
    assertDataFrameEqual(frame, expected(spark, results, list(range(7))), checkRowOrder=True)


async def test_the_body_only_when_asked(spark: SparkSession, tmp_path: Path) -> None:
    results = await write_store(tmp_path, SENT[:2])
    config = make_config(tmp_path, segment_size=SEGMENT)

    assert "body" not in read(spark, config).columns
    assertDataFrameEqual(read(spark, config, body="true"), expected(spark, results, [0, 1], body=True))


@pytest.mark.parametrize("tear", ["half a record after the last", "the last record's CRC"])
async def test_a_torn_tail_ends_the_read_as_recovery_would_cut_it(
    spark: SparkSession, tmp_path: Path, tear: str
) -> None:
    results = await write_store(tmp_path, SENT[:5])
    config = make_config(tmp_path, segment_size=SEGMENT)
    last = results[-1]
    if tear.startswith("half"):
        write_at(config, last.physical_offset + last.size, encode_record(MessageRecord("T", BODY))[:300])
    else:
        write_at(config, last.physical_offset + CRC_AT, b"\xde\xad\xbe\xef")

    kept = 5 if tear.startswith("half") else 4
    assertDataFrameEqual(read(spark, config), expected(spark, results, list(range(kept))))


async def test_a_damaged_record_mid_log_fails_the_read_naming_it_until_repaired(
    spark: SparkSession, tmp_path: Path
) -> None:
    results = await write_store(tmp_path, SENT[:5])
    config = make_config(tmp_path, segment_size=SEGMENT)
    damaged = results[1].physical_offset
    write_at(config, damaged + 500, b"flipped")  # inside the second record's body: the third follows it

    with pytest.raises(PySparkException) as raised:
        read(spark, config).collect()

    message = str(raised.value)
    assert "DamagedSegment" in message, message
    assert f"has a damaged record at offset {damaged} (CRC mismatch" in message, message
    assert f"petrel store repair {tmp_path}" in message, message

    assert [q.offset for q in repair_store(tmp_path)] == [damaged]
    assertDataFrameEqual(read(spark, config), expected(spark, results, [0, 2, 3, 4]), checkRowOrder=True)


def test_a_path_that_is_no_directory_is_refused_by_name(spark: SparkSession, tmp_path: Path) -> None:
    register_commitlog_source(spark)
    missing = tmp_path / "brokers" / "broker-a"

    with pytest.raises(PySparkException, match="is not a directory: give a broker's <data dir>/commitlog"):
        spark.read.format(SHORT_NAME).load(str(missing)).collect()


def test_an_empty_commitlog_is_an_empty_frame(spark: SparkSession, tmp_path: Path) -> None:
    config = make_config(tmp_path)
    config.commitlog_dir.mkdir()

    assertDataFrameEqual(read(spark, config), spark.createDataFrame([], COLUMNS))


async def test_commitlog_daily_counts_messages_and_bytes_per_topic_stored_that_day(
    spark: SparkSession, tmp_path: Path
) -> None:
    # T0 is 2023-11-14T22:13:20Z: a message every 30 minutes puts the 5th past midnight (UTC).
    await write_store(tmp_path, SENT, step_seconds=1800)
    commitlog = str(make_config(tmp_path).commitlog_dir)

    day = commitlog_daily(spark, commitlog, dt.date(2023, 11, 14))
    next_day = commitlog_daily(spark, f"file://{commitlog}", dt.date(2023, 11, 15))

    schema = "dt date, topic string, messages bigint, bytes bigint"
    nov14, nov15 = dt.date(2023, 11, 14), dt.date(2023, 11, 15)
    assertDataFrameEqual(day, spark.createDataFrame([(nov14, "orders", 3, 3004), (nov14, "audit", 1, 1002)], schema))
    assertDataFrameEqual(
        next_day, spark.createDataFrame([(nov15, "orders", 2, 2011), (nov15, "audit", 1, 1004)], schema)
    )
