"""`petrel store dump`: a store's records in CommitLog order, or one ConsumeQueue's units, read-only.

One line per record::

    offset=4096 size=213 queue=orders/3 queue_offset=17 stored=2024-05-01T12:00:00.123Z id=0A1B... tag=TagA
        keys=k1,k2 body='first 60 characters of the body'           (all on one line)

`body_base64=` replaces `body=` for a body the producer sent as base64 (SysFlag.BINARY_BODY).
With --json, one JSON object per record with every field and the whole body ("body", or
"body_base64" for a binary body or one that is not UTF-8).

The dump follows each segment's records up to an all-zero header or a blank filler, and raises
CorruptRecord (with its CommitLog offset) at a record it cannot frame: `petrel store check`
says more. CRCs are not verified, so a damaged body is still shown.
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from libs import jsonutil
from libs.codec import BLANK_MAGIC, FRAME_SIZE, QUARANTINE_MAGIC, decode_record, peek_frame, peek_head, record_size
from libs.errors import CorruptRecord
from libs.message import MessageRecord, SysFlag
from libs.store.tools.shared import SegmentMaps, StoreToolError, queue_files, read_units, segment_files, store_config

PREVIEW_CHARS: Final = 60


@dataclasses.dataclass(frozen=True, slots=True)
class StoredRecord:
    offset: int
    """Where the record is in the CommitLog."""
    size: int
    record: MessageRecord


@dataclasses.dataclass(frozen=True, slots=True)
class QueueUnit:
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int


def records(
    root: Path, *, topic: str | None = None, queue_id: int | None = None, start: int = 0, limit: int | None = None
) -> Iterator[StoredRecord]:
    """Records at CommitLog offsets from `start` on, of `topic` and `queue_id` when given, at most `limit`."""
    config = store_config(root)
    with SegmentMaps() as maps:
        found = (
            stored
            for segment in segment_files(config)
            if segment.start + segment.size > start
            for stored in _segment_records(maps.view(segment), segment.start, start, topic, queue_id)
        )
        yield from itertools.islice(found, limit)


def _segment_records(
    view: memoryview, base: int, start: int, topic: str | None, queue_id: int | None
) -> Iterator[StoredRecord]:
    pos = 0
    while pos + FRAME_SIZE <= len(view):
        total, magic = peek_frame(view, pos)
        if magic == BLANK_MAGIC or (total == 0 and magic == 0):
            return
        if magic == QUARANTINE_MAGIC and total >= FRAME_SIZE:
            pos += total  # a record a repair took out
            continue
        try:
            size, _ = record_size(view, pos)
            wanted = base + pos >= start and _wanted(view, pos, topic, queue_id)
            record = decode_record(view, pos, verify_crc=False) if wanted else None
        except CorruptRecord as exc:
            raise CorruptRecord(base + pos, exc.reason) from None
        if record is not None:
            yield StoredRecord(base + pos, size, record)
        pos += size


def _wanted(view: memoryview, pos: int, topic: str | None, queue_id: int | None) -> bool:
    if topic is None and queue_id is None:
        return True
    head = peek_head(view, pos)
    return (topic is None or head.topic == topic) and (queue_id is None or head.queue_id == queue_id)


def record_line(stored: StoredRecord) -> str:
    r = stored.record
    keys = ",".join(r.keys) or "-"
    return (
        f"offset={stored.offset} size={stored.size} queue={r.topic}/{r.queue_id} queue_offset={r.queue_offset} "
        f"stored={iso_utc(r.store_timestamp)} id={r.message_id or '-'} tag={r.tag or '-'} keys={keys} "
        f"{_body_preview(r)}"
    )


def record_json(stored: StoredRecord) -> str:
    r = stored.record
    value: dict[str, Any] = {
        "physical_offset": stored.offset,
        "size": stored.size,
        "topic": r.topic,
        "queue_id": r.queue_id,
        "queue_offset": r.queue_offset,
        "store_timestamp": r.store_timestamp,
        "stored": iso_utc(r.store_timestamp),
        "born_timestamp": r.born_timestamp,
        "born_host": r.born_host,
        "store_host": r.store_host,
        "message_id": r.message_id,
        "tag": r.tag,
        "keys": r.keys,
        "flag": r.flag,
        "sysflag": r.sysflag,
        "reconsume_times": r.reconsume_times,
        "properties": dict(r.properties),
    }
    text = None if r.sysflag & SysFlag.BINARY_BODY else _utf8(r.body)
    if text is None:
        value["body_base64"] = base64.b64encode(r.body).decode()
    else:
        value["body"] = text
    return jsonutil.dumps(value).decode()


def units(root: Path, topic: str, queue_id: int, *, start: int = 0, limit: int | None = None) -> Iterator[QueueUnit]:
    """The queue's units from queue offset `start` on, at most `limit`."""
    directory = store_config(root).consumequeue_dir / topic / str(queue_id)
    if not directory.is_dir():
        raise StoreToolError(f"{root} has no ConsumeQueue {topic}/{queue_id}")
    found = (
        QueueUnit(queue_file.first_unit + index, *unit)
        for queue_file in queue_files(directory)
        for index, unit in enumerate(read_units(queue_file.path))
        if queue_file.first_unit + index >= start
    )
    yield from itertools.islice(found, limit)


def unit_line(unit: QueueUnit) -> str:
    return f"queue_offset={unit.queue_offset} offset={unit.physical_offset} size={unit.size} tags_code={unit.tags_code}"


def unit_json(unit: QueueUnit) -> str:
    return jsonutil.dumps(dataclasses.asdict(unit)).decode()


def iso_utc(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 UTC: 2024-05-01T12:00:00.123Z."""
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


def _utf8(body: bytes) -> str | None:
    try:
        return body.decode()
    except UnicodeDecodeError:
        return None


def _body_preview(record: MessageRecord) -> str:
    if record.sysflag & SysFlag.BINARY_BODY:
        encoded = base64.b64encode(record.body).decode()
        return "body_base64=" + encoded[:PREVIEW_CHARS] + ("..." if len(encoded) > PREVIEW_CHARS else "")
    text = record.body.decode(errors="replace")
    return "body=" + repr(text[:PREVIEW_CHARS]) + ("..." if len(text) > PREVIEW_CHARS else "")
