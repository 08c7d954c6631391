"""`petrel-commitlog`: a PySpark Python Data Source that reads a broker's CommitLog segments directly.

    register_commitlog_source(spark)
    spark.read.format("petrel-commitlog").load("/var/lib/petrel/broker/commitlog")

One row per stored message, one Spark partition per segment file, so executors read
the segments in parallel. The path (a directory, or a `file://` URI) is listed on
the driver; each partition carries the paths an executor needs, which must therefore
see the same files (local mode, or a filesystem every executor mounts).

Columns (`COLUMNS`): topic, queue_id, queue_offset, physical_offset, born_timestamp,
store_timestamp (both TIMESTAMP: the record's milliseconds as an instant, shown in the
session's time zone), tag, keys, properties (every property the record carries, the
system ones included), body_size, message_id; and `body` (binary) only with
`.option("body", "true")`.

How a segment is read follows recovery (libs.store.recovery), and uses the codec
(libs.codec) and the CommitLog's own checks (libs.store.commitlog) for every byte:

- a blank filler reaching the segment's end ends that segment;
- a quarantine filler (what `petrel store repair` left) is passed over;
- a record that cannot be read (torn, zeroed, bad CRC) after which nothing of this log
  follows ends the read there, as recovery would cut the log there: the torn tail of a
  live or crashed broker, or the unwritten rest of the last segment;
- one after which records of this log do follow is damage in the middle of the log:
  recovery refuses to start on it, and so the read fails with `DamagedSegment`, naming
  the segment, the offset and the repair command, rather than return a silently
  incomplete day.
"""

from __future__ import annotations

import itertools
import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlparse

import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type information
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from libs.codec import BLANK_MIN_SIZE, FRAME_SIZE, QUARANTINE_MAGIC, decode_record, peek_frame, record_size
from libs.errors import CorruptRecord
from libs.message import MessageRecord
from libs.store.commitlog import describe_damage, next_record_in, surely_ours
from libs.store.mapped_file_queue import NAME_DIGITS, file_name

SHORT_NAME: Final = "petrel-commitlog"

COLUMNS: Final = (
    "topic string, queue_id int, queue_offset bigint, physical_offset bigint, "
    "born_timestamp timestamp, store_timestamp timestamp, tag string, keys array<string>, "
    "properties map<string,string>, body_size int, message_id string"
)
BODY_COLUMN: Final = "body binary"
BATCH_ROWS: Final = 10_000
"""Records per Arrow batch an executor hands Spark: bounded memory, whatever the segment size."""


class CommitLogSourceError(Exception):
    """The path given is not something this source can read (no such directory, another scheme, a gap)."""


class DamagedSegment(Exception):
    """A record that cannot be read, with records of the log after it: what recovery refuses to start on."""

    def __init__(self, segment: str, offset: int, reason: str) -> None:
        root = Path(segment).parent.parent
        super().__init__(
            f"CommitLog segment {segment} has a damaged record at offset {offset} ({reason}), and records of the "
            f"log follow it: the broker would not start on this store either. `petrel store check {root}` lists "
            f"the damage; `petrel store repair {root}` (broker stopped) quarantines it, and this source then "
            f"reads past it."
        )
        self.segment = segment
        self.offset = offset
        self.reason = reason


# ---- the driver: a directory to partitions ---------------------------------------------


@dataclass(frozen=True)
class SegmentPartition(InputPartition):
    """One segment file: all an executor needs to read it (no driver state)."""

    path: str
    start_offset: int
    """The CommitLog offset of the segment's first byte (its name)."""
    following: str | None
    """The next segment's path: where the log may go on after unreadable bytes; None for the last."""


def segment_partitions(uri: str) -> list[SegmentPartition]:
    """The segments under a CommitLog directory (path or file:// URI), in offset order."""
    directory = _local_directory(uri)
    names = sorted(p for p in directory.iterdir() if p.is_file() and p.name.isdigit() and len(p.name) == NAME_DIGITS)
    for before, after in itertools.pairwise(names):
        expected = int(before.name) + before.stat().st_size
        if int(after.name) != expected:
            raise CommitLogSourceError(f"segment {file_name(expected)} is missing before {after} in {directory}")
    following: list[str | None] = [str(p) for p in names[1:]]
    return [SegmentPartition(str(p), int(p.name), nxt) for p, nxt in zip(names, [*following, None], strict=False)]


def _local_directory(uri: str) -> Path:
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        raise CommitLogSourceError(
            f"{uri}: {SHORT_NAME} maps segment files, so it reads local paths (or file:// URIs on a filesystem "
            f"every executor mounts), not {parsed.scheme}://"
        )
    directory = Path(parsed.path if parsed.scheme else uri)
    if not directory.is_dir():
        raise CommitLogSourceError(f"{uri} is not a directory: give a broker's <data dir>/commitlog")
    return directory


# ---- an executor: a segment to rows ----------------------------------------------------


def segment_records(partition: SegmentPartition) -> Iterator[MessageRecord]:
    """The records of one segment file, read-only, ending as described in the module docstring."""
    with open(partition.path, "rb") as file:
        if not file.seek(0, 2):
            return
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            yield from _records_in(buf, partition)


def _records_in(buf: mmap.mmap, partition: SegmentPartition) -> Iterator[MessageRecord]:
    position = 0
    while position + FRAME_SIZE <= len(buf):
        total, magic = peek_frame(buf, position)
        if magic == QUARANTINE_MAGIC and BLANK_MIN_SIZE <= total <= len(buf) - position:
            position += total
            continue
        found = _record_at(buf, position)
        if found is None:
            if _log_ends_at(buf, partition, position):
                return
            reason = describe_damage(buf, partition.start_offset, position)
            raise DamagedSegment(partition.path, partition.start_offset + position, reason)
        size, record = found
        if record is None:
            return
        yield record
        position += size


def _record_at(buf: mmap.mmap, position: int) -> tuple[int, MessageRecord | None] | None:
    """(size, record) at `position`, (size, None) for the filler ending the segment, None when unreadable."""
    # No CorruptRecord may escape: its traceback would keep views of the map alive past its close.
    try:
        size, blank = record_size(buf, position)
        if blank:
            return (size, None) if position + size == len(buf) else None
        return size, decode_record(buf, position)
    except CorruptRecord:
        return None


def _log_ends_at(buf: mmap.mmap, partition: SegmentPartition, position: int) -> bool:
    """Recovery's test (CommitLog.next_valid): nothing of this log follows the unreadable bytes at `position`."""
    if next_record_in(buf, partition.start_offset, position + 1) is not None:
        return False
    if partition.following is None:
        return True
    with open(partition.following, "rb") as file:
        if not file.seek(0, 2):
            return True
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as following:
            return not surely_ours(following, int(Path(partition.following).name), 0)


def record_batch(records: list[MessageRecord], schema: pa.Schema) -> pa.RecordBatch:
    """The records as one Arrow batch of `schema` (COLUMNS, and the body when it is in the schema).

    Arrow, not tuples: Spark would convert tuples value by value, which costs more than decoding them.
    """
    columns: dict[str, list[Any]] = {
        "topic": [r.topic for r in records],
        "queue_id": [r.queue_id for r in records],
        "queue_offset": [r.queue_offset for r in records],
        "physical_offset": [r.physical_offset for r in records],
        "born_timestamp": [r.born_timestamp * 1000 for r in records],  # microseconds, as Spark keeps them
        "store_timestamp": [r.store_timestamp * 1000 for r in records],
        "tag": [r.tag for r in records],
        "keys": [r.keys for r in records],
        "properties": [r.properties for r in records],
        "body_size": [len(r.body) for r in records],
        "message_id": [r.message_id for r in records],
    }
    if "body" in schema.names:
        columns["body"] = [r.body for r in records]
    return pa.RecordBatch.from_arrays([pa.array(columns[f.name], type=f.type) for f in schema], schema=schema)


def batches(records: Iterator[MessageRecord], size: int) -> Iterator[list[MessageRecord]]:
    while chunk := list(itertools.islice(records, size)):
        yield chunk


# ---- the data source -------------------------------------------------------------------


def _wants_body(options: Any) -> bool:
    return str(options.get("body", "false")).strip().lower() == "true"


class CommitLogDataSource(DataSource):
    """`spark.read.format("petrel-commitlog").load(<commitlog dir>)`; option `body`: "true" adds the body."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> str:
        return f"{COLUMNS}, {BODY_COLUMN}" if _wants_body(self.options) else COLUMNS

    def reader(self, schema: StructType) -> DataSourceReader:
        path = self.options.get("path")
        if not path:
            raise CommitLogSourceError(f'{SHORT_NAME} needs a path: .load("<broker data dir>/commitlog")')
        return CommitLogReader(str(path), schema)


class CommitLogReader(DataSourceReader):
    """Pickled to the executors: holds the path and the schema, nothing else."""

    def __init__(self, path: str, schema: StructType) -> None:
        self.path = path
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        return list(segment_partitions(self.path))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SegmentPartition):
            return  # no segments: Spark still reads one partition, InputPartition(None)
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        for chunk in batches(segment_records(partition), BATCH_ROWS):
            yield record_batch(chunk, arrow_schema)


def register_commitlog_source(spark: SparkSession) -> None:
    """Make `petrel-commitlog` a format of this session (registering again is harmless)."""
    spark.dataSource.register(CommitLogDataSource)
