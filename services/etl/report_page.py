"""The report's HTML: a header (the day, what was read and quarantined, every table's rows), then per chart
a section with the chart, as an embedded PNG, and the numbers it draws in a table beneath.

A section with no rows for the day shows a "no data" panel instead of a chart (the push
section, of a day without push attempts, as most clusters have, one line instead). The
security section has no chart: its tables are the day's refusals and key changes. The page
is self-contained: inline style, system fonts, images as data: URIs, no script.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from html import escape
from typing import Any

from services.etl import plots
from services.etl.audit import DENIALS, KEY_CHANGES

Row = dict[str, Any]
TOP_ENDPOINTS = 5
"""The push section's table: at most this many endpoints, those with most failed and throttled attempts."""
TOP_KEYS = 5
"""The security section's keys: at most this many, those refused most."""


@dataclass(frozen=True, slots=True)
class DayTables:
    """What the report shows of D: the rows of the tables it draws, and how many rows every table has."""

    day: date
    warehouse: str
    topic_hourly: list[Row]
    group_hourly: list[Row]
    delay_daily: list[Row]
    data_quality: list[Row]
    push_hourly: list[Row]
    audit_daily: list[Row]
    row_counts: dict[str, int]


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2937;
       margin: 0 auto; max-width: 1040px; padding: 24px; background: #fff; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 0 0 8px; }
.sub { color: #6b7280; margin: 0 0 10px; }
.facts { display: flex; gap: 28px; flex-wrap: wrap; align-items: flex-start; margin-bottom: 4px; }
.boxes { display: grid; grid-template-columns: repeat(2, 1fr); gap: 10px; }
.fact { border: 1px solid #e5e7eb; border-radius: 8px; padding: 8px 14px; min-width: 110px; }
.fact b { display: block; font-size: 20px; } .fact span { color: #6b7280; font-size: 13px; }
.fact.bad b { color: #c23b3b; }
section { border-top: 1px solid #e5e7eb; padding: 12px 0; }
img { max-width: 100%; display: block; }
table { border-collapse: collapse; font-size: 13px; margin-top: 6px; }
th, td { padding: 3px 10px; text-align: right; border-bottom: 1px solid #f0f1f3; }
th { color: #6b7280; font-weight: 600; } th:first-child, td.name { text-align: left; }
.no-data { border: 1px dashed #cbd5e1; border-radius: 8px; padding: 28px; text-align: center;
           color: #6b7280; background: #f8fafc; }
"""


def report_page(tables: DayTables) -> str:
    day = tables.day.isoformat()
    sections = [
        _throughput(tables.topic_hourly, day),
        _latencies(tables.group_hourly, day),
        _failures(tables.group_hourly, day),
        _lateness(tables.delay_daily, day),
        _push(tables.push_hourly, day),
        _security(tables.audit_daily, day),
    ]
    return "\n".join(
        [
            "<!doctype html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>Petrel ETL report {day}</title><style>{STYLE}</style></head><body>",
            _header(tables),
            *sections,
            "</body></html>",
        ]
    )


def _header(tables: DayTables) -> str:
    measures: dict[str, int] = {}
    reasons: list[tuple[str, int]] = []
    checks: list[tuple[str, int]] = []  # the invariants (0 included) and the topics the CommitLogs do not reconcile
    for row in tables.data_quality:
        if row["measure"] == "quarantined":
            reasons.append((row["detail"], row["count"]))
        elif row["measure"] in ("invariant", "reconciliation"):
            checks.append((f"{row['measure']}: {row['detail']}", row["count"]))
        measures[row["measure"]] = measures.get(row["measure"], 0) + row["count"]
    reasons.sort()
    checks.sort()
    broken = sum(1 for _, count in checks if count)
    facts = [
        (measures.get("lines_read", 0), "lines read", False),
        (measures.get("events", 0), "events in", False),
        (measures.get("late_events", 0), "late events", False),
        (measures.get("quarantined", 0), "quarantined", measures.get("quarantined", 0) > 0),
        (broken, "checks failed", broken > 0),
    ]
    boxes = "".join(
        f'<div class="fact{" bad" if bad else ""}"><b>{value:,}</b><span>{label}</span></div>'
        for value, label, bad in facts
    )
    quarantined = _table(["quarantine reason", "lines"], [[reason, count] for reason, count in reasons])
    failed = _table(["check", "count"], [[name, count] for name, count in checks])
    counts = _table(["table", "rows"], [[name, rows] for name, rows in tables.row_counts.items()])
    return (
        f"<h1>Petrel ETL report: {tables.day.isoformat()}</h1>"
        f'<p class="sub">the tables under {escape(tables.warehouse)}, dt={tables.day.isoformat()} (UTC)</p>'
        f'<div class="facts"><div class="boxes">{boxes}</div><div>{counts}</div>'
        f"<div>{quarantined}</div><div>{failed}</div></div>"
    )


def _throughput(rows: Sequence[Row], day: str) -> str:
    totals = _totals(rows, ["topic"], ["sent", "bytes_sent", "delayed", "transactional"])
    busiest = {}
    for row in sorted(rows, key=lambda r: (r["sent"], -r["hour"])):
        busiest[row["topic"]] = f"{row['hour']:02d}:00" if row["sent"] else "-"
    table = _table(
        ["topic", "sent", "bytes sent", "delayed", "transactional", "busiest hour"],
        [[*total, busiest[total[0]]] for total in totals],
    )
    return _section("Throughput per hour", "messages sent per topic per UTC hour", rows, plots.throughput, table, day)


def _latencies(rows: Sequence[Row], day: str) -> str:
    columns = [f"{kind}_{p}_ms" for kind in ("delivery", "ack") for p in ("p50", "p95", "p99")]
    timed = [row for row in rows if any(row[c] is not None for c in columns)]
    table = _table(
        ["group", "topic", "hour", *(c.removesuffix("_ms").replace("_", " ") + " ms" for c in columns)],
        [
            [row["group"], row["topic"], f"{row['hour']:02d}:00", *(row[c] for c in columns)]
            for row in sorted(timed, key=lambda r: (r["group"], r["topic"], r["hour"]))
        ],
    )
    what = "send to first delivery and to first ack, per group and topic, per UTC hour (a scheduled message: from due)"
    return _section("Latency percentiles", what, timed, plots.latencies, table, day)


def _failures(rows: Sequence[Row], day: str) -> str:
    counts = ["delivered", "acked", "nacked", "retried", "dead_lettered", "redriven"]
    totals = _totals(rows, ["group", "topic"], counts)
    table = _table(["group", "topic", *(c.replace("_", " ") for c in counts)], totals)
    records = [dict(zip(["group", "topic", *counts], total, strict=True)) for total in totals]
    what = "the day's nacks, redeliveries from the retry queue and dead letters, per group and topic"
    return _section("Retries and dead letters", what, records, plots.failures, table, day)


def _lateness(rows: Sequence[Row], day: str) -> str:
    counts = ["scheduled", "fired", "cancelled", "rolled", "failed", "lost"]
    columns = ["lateness_p50_ms", "lateness_p95_ms", "lateness_p99_ms"]
    named = [row | {"topic": row["topic"] or "(timer)"} for row in sorted(rows, key=lambda r: str(r["topic"] or ""))]
    table = _table(
        ["topic", *counts, *(c.removesuffix("_ms").replace("_", " ") + " ms" for c in columns)],
        [[row["topic"], *(row[c] for c in counts), *(row[c] for c in columns)] for row in named],
    )
    fired = [row for row in named if row["lateness_p50_ms"] is not None]
    what = "how long after its due time a scheduled message reached its topic"
    empty = "no scheduled message fired" if named else ""
    return _section("Delay lateness", what, fired, plots.lateness, table, day, empty)


def _push(rows: Sequence[Row], day: str) -> str:
    """Attempts by outcome per hour and the endpoints that failed or throttled most; a day without: one line."""
    title = "Push deliveries"
    if not rows:
        return f'<section><h2>{title}</h2><p class="sub">no push attempts on {day}</p></section>'
    counts = ["attempts", "failed", "throttled", "gone", "no_answer"]
    totals = _totals(rows, ["endpoint"], counts)  # [endpoint, attempts, failed, throttled, ...], by endpoint

    def trouble(total: list[Any]) -> int:
        return int(total[2] + total[3])

    top = sorted((total for total in totals if trouble(total)), key=lambda total: -trouble(total))[:TOP_ENDPOINTS]
    table = _table(["endpoint", *(c.replace("_", " ") for c in counts)], top)
    what = (
        f"webhook attempts per UTC hour by outcome; the endpoints (at most {TOP_ENDPOINTS}) failing or throttled most"
    )
    return _section(title, what, rows, plots.push_attempts, table, day)


def _security(rows: Sequence[Row], day: str) -> str:
    """Refused calls by action, the keys refused most, the keys created and revoked; a day without: one line."""
    title = "Security"
    if not rows:
        return f'<section><h2>{title}</h2><p class="sub">no audit events on {day}</p></section>'
    admin_calls = sum(row["calls"] for row in rows if row["action"] == "admin_call")
    what = (
        f"calls refused (401 unauthorized, 403 forbidden, 429 rate limited), the keys refused most (at most "
        f"{TOP_KEYS}), the keys created and revoked; {admin_calls:,} admin calls"
    )
    parts = [_refused(rows), _refused_keys(rows), _key_changes(rows)]
    return f'<section><h2>{title}</h2><p class="sub">{escape(what)}</p>{"".join(parts)}</section>'


def _refused(rows: Sequence[Row]) -> str:
    """Every refusal action, 0 included: its calls, with a key and without one, and the keys refused."""
    table = []
    for action in DENIALS:
        own = [row for row in rows if row["action"] == action]
        keyed = [row for row in own if row["key_id"] is not None]
        calls, with_key = sum(row["calls"] for row in own), sum(row["calls"] for row in keyed)
        keys = len({row["key_id"] for row in keyed})
        table.append([action.replace("_", " "), calls, with_key, calls - with_key, keys])
    return _table(["refused", "calls", "with a key", "without a key", "keys"], table)


def _refused_keys(rows: Sequence[Row]) -> str:
    per_key: dict[tuple[str | None, str], Row] = {}
    for row in rows:
        if row["action"] in DENIALS and row["key_id"] is not None:
            key = per_key.setdefault((row["key_name"], row["key_id"]), dict.fromkeys(DENIALS, 0) | {"last": ""})
            key[row["action"]] += row["calls"]
            key["last"] = max(key["last"], row["last_at"])
    ranked = sorted(per_key.items(), key=lambda item: (-sum(item[1][a] for a in DENIALS), str(item[0])))
    table = [[name, key_id, *(key[a] for a in DENIALS), key["last"]] for (name, key_id), key in ranked[:TOP_KEYS]]
    header = ["key", "key id", *(a.replace("_", " ") for a in DENIALS), "last refused"]
    return _table(header, table) or '<p class="sub">no key was refused</p>'


def _key_changes(rows: Sequence[Row]) -> str:
    changes = sorted((row for row in rows if row["action"] in KEY_CHANGES), key=lambda row: row["first_at"])
    table = [[*_key_change(row), row["calls"], row["first_at"], row["last_at"]] for row in changes]
    header = ["key change", "by", "keys", "calls", "first", "last"]
    return _table(header, table) or '<p class="sub">no key was created or revoked</p>'


def _key_change(row: Row) -> list[str | None]:
    """What changed (created, revoked), by whose key (none: `petrel keys create`), on which keys."""
    return [row["action"].replace("_", " "), row["key_name"] or "(no key)", ", ".join(row["top_resources"]) or None]


def _section(
    title: str,
    what: str,
    rows: Sequence[Row],
    chart: Callable[[Sequence[Row]], bytes],
    table: str,
    day: str,
    empty: str = "",
) -> str:
    if rows:
        png = base64.b64encode(chart(rows)).decode("ascii")
        body = f'<img alt="{escape(title)}" src="data:image/png;base64,{png}">{table}'
    else:
        body = f'<div class="no-data">no data: {escape(empty or "no rows for " + day)}</div>{table}'
    return f'<section><h2>{escape(title)}</h2><p class="sub">{escape(what)}</p>{body}</section>'


def _totals(rows: Sequence[Row], keys: list[str], counts: list[str]) -> list[list[Any]]:
    """The day's sums of `counts` per `keys`, sorted by the keys."""
    sums: dict[tuple[Any, ...], list[int]] = {}
    for row in rows:
        total = sums.setdefault(tuple(row[k] for k in keys), [0] * len(counts))
        for i, column in enumerate(counts):
            total[i] += row[column] or 0
    return [[*key, *total] for key, total in sorted(sums.items(), key=lambda item: tuple(map(str, item[0])))]


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    if not rows:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(value) for value in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value: Any) -> str:
    if value is None:
        return "<td>-</td>"
    if isinstance(value, int):
        return f"<td>{value:,}</td>"
    return f'<td class="name">{escape(str(value))}</td>'  # a name: left, where a number is right
