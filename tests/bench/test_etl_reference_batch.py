"""bench.etl_reference reads batch lines as the job does: one event per item, an item's field winning (`events_of`)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import orjson

from bench.etl_reference import connect
from bench.etl_reference_read import read_events
from libs.events.contract import events_of

DAY = date(2026, 11, 22)
TS = 1_795_860_000_000
SHARED = {"ts": TS, "event": "acked", "service": "broker", "pid": 9, "broker": "b", "group": "g"}


def _acked(message_id: str, **fields: object) -> dict[str, object]:
    return {"message_id": message_id, "topic": "t", "queue_id": 1, "queue_offset": 2, "delivery_attempt": 1, **fields}


LINES = [
    {**SHARED, "batch": [_acked("m1"), _acked("m2", queue_id=None)]},
    {**SHARED, **_acked("m3")},
    {**SHARED, "batch": [_acked("m4"), {"message_id": "m5", "topic": "t", "queue_id": 1, "queue_offset": 3}]},
]


def _parsed(tmp_path: Path) -> list[tuple[object, ...]]:
    folder = tmp_path / f"dt={DAY.isoformat()}" / "hour=10"
    folder.mkdir(parents=True)
    (folder / "broker-9.jsonl").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in LINES))
    con = connect()
    read_events(con, tmp_path, DAY, 0)
    rows = con.execute('SELECT e.message_id, e.queue_id, e."group", reason FROM parsed ORDER BY 1').fetchall()
    return [tuple(row) for row in rows]


def test_a_batch_line_is_one_event_per_item(tmp_path: Path) -> None:
    expected = [(e["message_id"], e.get("queue_id"), e["group"]) for line in LINES for e in events_of(line)]
    assert [row[:3] for row in _parsed(tmp_path)] == sorted(expected, key=lambda event: str(event[0]))


def test_an_item_missing_a_required_field_is_quarantined_alone(tmp_path: Path) -> None:
    reasons = {row[0]: row[3] for row in _parsed(tmp_path)}
    assert reasons == {"m1": None, "m2": None, "m3": None, "m4": None, "m5": "missing_field"}
