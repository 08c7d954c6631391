"""Hand-written lifecycle events for the ETL tests, written in the exporter's layout.

`line(...)` is one event as `libs.events.writer` would write it (common fields
filled in); `write_lines` puts lines under `<root>/dt=YYYY-MM-DD/hour=HH/<name>.jsonl`
by their `ts` (the exporter's rule), or in the folder given (a late event, a
corrupt line); `batched(events)` is the same events as batch lines (the contract's
newer form). `at("2026-11-22 10:15")` is the ms of a UTC time.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from libs.events.contract import BATCH, EVENTS

SERVICE_OF = {"sent": "gateway", "transaction_half": "gateway", "delay_cancelled": "gateway", "audit": "gateway"}


def at(utc: str) -> int:
    """Milliseconds since the epoch of 'YYYY-MM-DD HH:MM[:SS]' in UTC."""
    return int(datetime.fromisoformat(utc).replace(tzinfo=UTC).timestamp() * 1000)


def line(event: str, ts: int, **fields: Any) -> dict[str, Any]:
    """One contract-true event; a test that wants a broken one writes raw text instead."""
    spec = EVENTS[event]
    missing = spec.required - fields.keys()
    assert not missing, f"{event} needs {sorted(missing)}"
    return {"ts": ts, "event": event, "service": SERVICE_OF.get(event, "broker"), "pid": 7, **fields}


def batched(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same events as batch lines: those of one event name, service and day folder in one line (in their
    order, in the hour folder of the first), the fields all of them hold with one value on the line, the rest
    in its `batch` items (a `ts` too, when they differ); an event alone stays a plain line."""
    groups: dict[tuple[str, str, int, str], list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        groups[(event["event"], event["service"], event["pid"], folder_of(event["ts"])[0])].append(event)
    lines = []
    for group in groups.values():
        if len(group) == 1:
            lines.append(group[0])
            continue
        shared = {k: v for k, v in group[0].items() if all(k in e and e[k] == v for e in group)}
        lines.append({**shared, BATCH: [{k: v for k, v in e.items() if k not in shared} for e in group]})
    return lines


def folder_of(ts: int) -> tuple[str, str]:
    moment = datetime.fromtimestamp(ts / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d"), moment.strftime("%H")


def write_lines(root: Path, lines: Sequence[dict[str, Any] | str], *, folder: tuple[str, str] | None = None) -> None:
    """Append lines (events, or raw text) to `<root>/dt=../hour=../test-7.jsonl`: by `ts`, or all in `folder`."""
    files: dict[Path, list[str]] = defaultdict(list)
    for item in lines:
        if isinstance(item, str):
            if folder is None:
                raise ValueError("a raw line needs a folder")
            day, hour, text = *folder, item
        else:
            day, hour = folder or folder_of(item["ts"] if "ts" in item else item[BATCH][0]["ts"])
            text = json.dumps(item)
        files[root / f"dt={day}" / f"hour={hour}" / "test-7.jsonl"].append(text)
    for path, texts in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as out:
            out.write("".join(text + "\n" for text in texts))


DAY = "2026-11-22"


def _stored(message_id: str, topic: str, group: str, attempt: int, offset: int) -> dict[str, Any]:
    return {
        "message_id": message_id,
        "topic": topic,
        "queue_id": 0,
        "queue_offset": offset,
        "broker": "broker-a",
        "group": group,
        "delivery_attempt": attempt,
    }


def november_22() -> list[dict[str, Any]]:
    """A day of stories on 2026-11-22, each event in the folder of its `ts` (the late one aside: `late_send`).

    m1 sent, delivered, acked (g1); m2 nacked, retried, redelivered (from g1's retry queue) and dead-lettered by
    g1, acked by g2; m3 scheduled for 12:00, fired 500 ms late, acked; m5 scheduled then
    cancelled; t1 committed by its producer and acked; t2 rolled back after a check-back;
    one roll of the timer (no topic). m0 is the day before's. What breaks an invariant or stalls:
    `awry_22nd`.
    """
    o, p = "orders", "payments"
    return [
        line("sent", at("2026-11-21 22:00"), message_id="m0", topic=o, size=1),
        line(
            "transaction_half", at(f"{DAY} 09:00"), message_id="t1", topic=p, transaction_id="b:t1", producer_group="pg"
        ),
        line(
            "transaction_commit", at(f"{DAY} 09:00:01"), message_id="t1", topic=p, transaction_id="b:t1", by="producer"
        ),
        line("delivered", at(f"{DAY} 09:00:02"), **_stored("t1", p, "g1", 1, 0)),
        line("acked", at(f"{DAY} 09:00:03"), **_stored("t1", p, "g1", 1, 0)),
        line(
            "transaction_half", at(f"{DAY} 09:30"), message_id="t2", topic=p, transaction_id="b:t2", producer_group="pg"
        ),
        line(
            "transaction_check",
            at(f"{DAY} 09:31"),
            message_id="t2",
            topic=p,
            transaction_id="b:t2",
            check_count=1,
            answer="ROLLBACK",
            latency_ms=40,
        ),
        line(
            "transaction_rollback", at(f"{DAY} 09:31"), message_id="t2", topic=p, transaction_id="b:t2", by="checkback"
        ),
        line("sent", at(f"{DAY} 10:05"), message_id="m1", topic=o, size=100, keys=["k1"]),
        line("delivered", at(f"{DAY} 10:05:01"), **_stored("m1", o, "g1", 1, 1)),
        line("acked", at(f"{DAY} 10:05:03"), **_stored("m1", o, "g1", 1, 1)),
        line("sent", at(f"{DAY} 10:10"), message_id="m2", topic=o, size=50, tag="red"),
        line("delivered", at(f"{DAY} 10:10:02"), **_stored("m2", o, "g1", 1, 2)),
        line("nacked", at(f"{DAY} 10:10:03"), **_stored("m2", o, "g1", 1, 2), reason="busy"),
        line("retried", at(f"{DAY} 10:10:03"), message_id="m2", topic=o, group="g1", delivery_attempt=1, delay_ms=1000),
        line("delivered", at(f"{DAY} 10:10:04"), **_stored("m2", o, "g2", 1, 2)),
        line("acked", at(f"{DAY} 10:10:05"), **_stored("m2", o, "g2", 1, 2)),
        line("delivered", at(f"{DAY} 10:20"), **_stored("m2", "%RETRY%g1", "g1", 2, 0)),  # from the retry queue
        line(
            "dead_lettered", at(f"{DAY} 10:20:01"), message_id="m2", topic=o, group="g1", delivery_attempt=2, reason="x"
        ),
        line("sent", at(f"{DAY} 11:30"), message_id="m3", topic=o, size=30),
        line("delay_scheduled", at(f"{DAY} 11:30"), message_id="m3", topic=o, deliver_at=at(f"{DAY} 12:00")),
        line(
            "delay_fired",
            at(f"{DAY} 12:00:00.5"),
            message_id="m3",
            topic=o,
            deliver_at=at(f"{DAY} 12:00"),
            lateness_ms=500,
        ),
        line("delivered", at(f"{DAY} 12:00:01"), **_stored("m3", o, "g1", 1, 3)),
        line("acked", at(f"{DAY} 12:00:02"), **_stored("m3", o, "g1", 1, 3)),
        line("sent", at(f"{DAY} 13:00"), message_id="m5", topic=o, size=20),
        line("delay_scheduled", at(f"{DAY} 13:00"), message_id="m5", topic=o, deliver_at=at(f"{DAY} 15:00")),
        line("delay_cancelled", at(f"{DAY} 13:05"), message_id="m5", topic=o, deliver_at=at(f"{DAY} 15:00")),
        line(
            "delay_rolled",
            at(f"{DAY} 14:00"),
            message_id=None,
            topic=None,
            deliver_at=at("2026-12-01 00:00"),
            roll_times=1,
        ),
        line("delivered", at("2026-11-23 00:00:10"), **_stored("m4", o, "g1", 1, 4)),
    ]


def awry_22nd() -> list[dict[str, Any]]:
    """The same day's troubles: each breaks one data-quality invariant, or makes a group lag for hours.

    t2, rolled back at 09:31, is delivered to g3 anyway; g2 acks m7, whose send no file holds; m8 is
    dead-lettered by g3 with no reason, then redriven at 17:30 and never acked; m6, sent at 20:30, is
    delivered to g3 and never acked. g3 lags on orders from 17:00 (m8) to the day's end, by two from 20:00.
    """
    o, p = "orders", "payments"
    return [
        line("delivered", at(f"{DAY} 09:32"), **_stored("t2", p, "g3", 1, 1)),
        line("acked", at(f"{DAY} 15:00"), **_stored("m7", o, "g2", 1, 7)),
        line("sent", at(f"{DAY} 16:00"), message_id="m8", topic=o, size=60),
        line("delivered", at(f"{DAY} 16:00:01"), **_stored("m8", o, "g3", 1, 8)),
        line(
            "dead_lettered",
            at(f"{DAY} 16:00:02"),
            message_id="m8",
            topic=o,
            group="g3",
            delivery_attempt=1,
            reason=None,
        ),
        line("redriven", at(f"{DAY} 17:30"), message_id="m8", topic=o, group="g3"),
        line("sent", at(f"{DAY} 20:30"), message_id="m6", topic=o, size=40),
        line("delivered", at(f"{DAY} 20:31"), **_stored("m6", o, "g3", 1, 6)),
    ]


def late_send() -> dict[str, Any]:
    """m4, sent at 23:59:30 on the 22nd but written to the 23rd's files (folder `LATE_FOLDER`)."""
    return line("sent", at(f"{DAY} 23:59:30"), message_id="m4", topic="orders", size=10)


LATE_FOLDER = ("2026-11-23", "00")
CORRUPT_FOLDER = (DAY, "10")
CORRUPT_LINES = [
    "{not json",
    '{"ts": 1795341600000, "event": "sent", "service": "gateway", "pid": 7, "topic": "orders"}',
    '{"ts": 1795341600000, "event": "exploded", "service": "gateway", "pid": 7}',
    '{"ts": "soon", "event": "sent", "service": "gateway", "pid": 7, "message_id": "m9", "topic": "orders"}',
]
"""malformed JSON; a send with no message_id; an event not in the contract; a ts that is not a number."""


def write_november_22(root: Path, *, form: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = list) -> None:
    """The whole story set: every event by its ts (the troubles too), the late send, and the corrupt lines;
    with `form=batched`, the events as batch lines."""
    write_lines(root, form([*november_22(), *awry_22nd()]))
    write_lines(root, [late_send()], folder=LATE_FOLDER)
    write_lines(root, list(CORRUPT_LINES), folder=CORRUPT_FOLDER)
