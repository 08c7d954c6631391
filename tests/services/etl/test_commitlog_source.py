"""`petrel-commitlog` reads segments the real store wrote: exact rows, a partition per segment, the fillers, damage;
the daily job reconciles what they stored with the events."""

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
from services.etl.commitlog_source import COLUMNS, SHORT_NAME, register_commitlog_source
from services.etl.events import read_event_log
from services.etl.job import tables
from services.etl.reconciliation import commitlog_daily_schema
from services.etl.settings import EtlSettings
from tests.support.clock import FakeClock
from tests.support.event_files import line, write_lines
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


async def write_store(root: Path, sent: list[Sent]) -> list[PutResult]:
    """A store on `root` holding `sent`, one put each, a second apart; closed cleanly."""
    return await write_records(
        root,
        [
            MessageRecord(
                topic=s.topic, body=s.body, queue_id=s.queue_id, properties=properties(i, s), born_timestamp=born(i)
            )
            for i, s in enumerate(sent)
        ],
    )


async def write_records(root: Path, records: list[MessageRecord], *, step_seconds: float = 1.0) -> list[PutResult]:
    """A store on `root` holding `records` as given, one put each from T0, `step_seconds` apart; closed cleanly."""
    clock = FakeClock()
    store = make_store(root, clock, segment_size=SEGMENT)
    results = []
    for record in records:
        results += stored(await store.put(encode_record(record)))
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


def copy(topic: str, message_id: str, body: bytes, **properties: str) -> MessageRecord:
    return MessageRecord(topic=topic, body=body, properties={"UNIQ_KEY": message_id, **properties})


STORED = [
    copy("orders", "ID0", b"a" * 100),
    copy("SCHEDULE_TOPIC_XXXX", "ID1", b"b" * 200, REAL_TOPIC="orders", REAL_QID="0", DELAY="2"),
    copy("payments", "ID2-never-sent", b"c" * 5),  # stored, yet no event says it was sent
    copy("RMQ_SYS_TRANS_HALF_TOPIC", "ID3", b"d" * 300, REAL_TOPIC="payments", REAL_QID="0", TRAN_MSG="true"),
    copy("orders", "ID1", b"b" * 200),  # the scheduled message, due
    copy("payments", "ID3", b"d" * 300),  # the transaction, committed
    copy("%RETRY%g1", "ID0", b"a" * 100),  # a retry
    copy("%DLQ%g1", "ID0", b"a" * 100),  # then a dead letter
]
"""A broker's day: two messages of orders (and four more copies of them), two of payments (one no event sent)."""
TX = {"transaction_id": "broker-a:ID3", "producer_group": "pg"}


async def test_the_daily_job_reconciles_what_was_stored_with_what_the_events_say(
    spark: SparkSession, tmp_path: Path
) -> None:
    await write_records(tmp_path / "broker-a", STORED, step_seconds=60)
    day = ms(T0_MS).date().isoformat()  # 2023-11-14: the records are a minute apart from 22:13:20
    events = tmp_path / "events"
    write_lines(
        events,
        [
            line("sent", T0_MS, message_id="ID0", topic="orders", size=180),
            line("sent", T0_MS + 60_000, message_id="ID1", topic="orders", size=290),
            line("delay_scheduled", T0_MS + 60_000, message_id="ID1", topic="orders", deliver_at=T0_MS + 240_000),
            line("transaction_half", T0_MS + 180_000, message_id="ID3", topic="payments", **TX),
        ],
    )
    settings = EtlSettings(
        events_uri=events.as_uri(),
        warehouse_uri=(tmp_path / "warehouse").as_uri(),
        commitlog_uris=str(make_config(tmp_path / "broker-a").commitlog_dir),
    )

    event_log = read_event_log(spark, settings.events, dt.date.fromisoformat(day), settings.lookback_days)
    job_tables = tables(spark, event_log, settings.commitlogs)  # the job's, without writing the others
    reconciled, quality = job_tables["commitlog_daily"](), job_tables["data_quality"]()

    expected = [("orders", 2, 300, 2, 470, True, day), ("payments", 2, 305, 1, 0, False, day)]
    assertDataFrameEqual(reconciled, spark.createDataFrame(expected, commitlog_daily_schema()))
    mismatches = quality.where("measure = 'reconciliation'").select("detail", "count").collect()
    assert [tuple(row) for row in mismatches] == [("payments", 1)]
    event_log.release()


def test_on_a_local_master_the_job_reads_the_local_brokers_commitlogs_unless_told_which(tmp_path: Path) -> None:
    assert EtlSettings(data_dir=tmp_path).commitlogs == []
    for broker in ("broker-b", "broker-a"):
        (tmp_path / "brokers" / broker / "commitlog").mkdir(parents=True)
    (tmp_path / "brokers" / "broker-c").mkdir()  # a broker that never stored anything

    found = EtlSettings(data_dir=tmp_path).commitlogs
    on_a_cluster = EtlSettings(data_dir=tmp_path, master="spark://127.0.0.1:7077").commitlogs
    given = EtlSettings(data_dir=tmp_path, commitlog_uris="/srv/a/commitlog, file:///srv/b/commitlog").commitlogs

    assert found == [(tmp_path / "brokers" / b / "commitlog").as_uri() for b in ("broker-a", "broker-b")]
    assert on_a_cluster == [], "a cluster's executors do not see this machine's CommitLogs"
    assert given == ["/srv/a/commitlog", "file:///srv/b/commitlog"]
