"""The nightly ETL's daily figures computed by DuckDB: what a single-machine user would run instead of Spark.

The same work as `services.etl.job.run_daily`, in SQL, over the same files: every
line of D's folder and its neighbours' read as text, parsed against the same contract
(`libs.events.contract`, with the job's field types; a batch line as one event per item,
as `events_of` makes them), quarantined for the same reasons; then topic_hourly,
group_hourly (counts, p50/p95/p99 latencies by
`approx_quantile` where the job uses `percentile_approx`, and the lag at each hour's
end: `bench.etl_reference_lag`), delay_daily, transaction_daily, message_journey,
push_hourly, audit_daily, data_quality (its invariants too) and the quarantine, each written as zstd Parquet
partitioned by `dt`. The count columns and the lag equal the job's
(tests/services/etl/test_bench_reference.py checks it on a generated day); the
percentiles are approximations by two different sketches, close but not equal.
Like the bench's run of the job, it reads no CommitLog: no commitlog_daily, no
`reconciliation` rows.

DuckDB is given what the job's `local[2]` session has: two threads (and, in the
bench, the driver's memory as its limit).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from datetime import date
from pathlib import Path

import duckdb

from bench.etl_reference_lag import hourly_lag
from bench.etl_reference_quality import data_quality
from bench.etl_reference_read import quoted, read_events, sql_in
from libs.names import RETRY_PREFIX
from services.etl.audit import AUDIT_KEYS, TOP, TOP_LISTS
from services.etl.delays import DELAY_EVENTS
from services.etl.journey import GROUP_EVENTS
from services.etl.push import OUTCOMES, STATUS_CLASSES
from services.etl.transactions import ENDERS, TRANSACTION_EVENTS

TABLES = (
    "topic_hourly",
    "group_hourly",
    "delay_daily",
    "transaction_daily",
    "message_journey",
    "push_hourly",
    "audit_daily",
    "data_quality",
    "quarantine",
)
WITH_OWN_TOPIC = "event_window w LEFT JOIN (SELECT message_id, topic FROM sends) s USING (message_id)"
"""The events, each with its message's send's topic: `OWN_TOPIC` is the topic a row counts under."""
OWN_TOPIC = f"CASE WHEN starts_with(w.topic, '{RETRY_PREFIX}') THEN coalesce(s.topic, w.topic) ELSE w.topic END"
"""A row's topic; a retry queue's row (a redelivery) counts under its message's own topic."""


def connect(threads: int = 2, memory_limit: str | None = None, spill: Path | None = None) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(config={"threads": threads, "preserve_insertion_order": False})
    con.execute("SET TimeZone = 'UTC'")
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
    if spill:
        con.execute(f"SET temp_directory = '{spill}'")
    return con


def daily_figures(
    con: duckdb.DuckDBPyConnection,
    events: Path,
    out: Path,
    day: date,
    lookback_days: int = 1,
    now_ms: int | None = None,
) -> dict[str, int]:
    """Read D's events (and `lookback_days` days' either side), write every table under `out`; rows per table.

    `now_ms` (default: now), as the job's, ends the lag's hours of a day that is not over.
    """
    read_events(con, events, day, lookback_days)
    _journeys(con)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    now = int(time.time() * 1000) if now_ms is None else now_ms
    for table, query in _tables(day, now).items():
        target = out / table
        copied = con.execute(
            f"COPY ({query}) TO '{target}' (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (dt), OVERWRITE_OR_IGNORE)"
        ).fetchone()
        written[table] = int(copied[0]) if copied else 0
    return written


def _journeys(con: duckdb.DuckDBPyConnection) -> None:
    """`sends` and `progress`, the message-level pieces group_hourly (its lag too) and message_journey share."""
    group_events = ", ".join(repr(e) for e in GROUP_EVENTS)
    con.execute("""
        CREATE OR REPLACE TEMP TABLE sends AS
        WITH sent AS (
            SELECT message_id, first(topic) FILTER (WHERE topic IS NOT NULL) AS topic, min(ts) AS sent_ts
            FROM event_window WHERE event IN ('sent', 'transaction_half') GROUP BY message_id
        ), due AS (
            SELECT message_id, max(deliver_at) AS due_ts FROM event_window
            WHERE event = 'delay_scheduled' GROUP BY message_id
        ), committed AS (
            SELECT message_id, min(ts) AS committed_ts FROM event_window
            WHERE event = 'transaction_commit' GROUP BY message_id
        ), rolled_back AS (
            SELECT DISTINCT message_id FROM event_window WHERE event = 'transaction_rollback'
        )
        SELECT sent.*, due.due_ts, committed.committed_ts, rolled_back.message_id IS NOT NULL AS rolled_back
        FROM sent LEFT JOIN due USING (message_id) LEFT JOIN committed USING (message_id)
                  LEFT JOIN rolled_back USING (message_id)
    """)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE progress AS
        SELECT message_id, "group",
               first(topic) FILTER (WHERE NOT starts_with(topic, '{RETRY_PREFIX}')) AS group_topic,
               min(ts) FILTER (WHERE event = 'delivered') AS delivered_ts,
               min(ts) FILTER (WHERE event = 'acked') AS acked_ts,
               max(ts) FILTER (WHERE event = 'dead_lettered') AS dead_lettered_ts,
               max(ts) FILTER (WHERE event = 'redriven') AS redriven_ts,
               max(delivery_attempt) FILTER (WHERE event = 'delivered') AS attempts
        FROM event_window WHERE event IN ({group_events}) AND "group" IS NOT NULL
        GROUP BY message_id, "group"
    """)


def _count(event: str, alias: str | None = None) -> str:
    return f"count(*) FILTER (WHERE event = '{event}') AS {quoted(alias or event)}"


def _percentiles(value: str, prefix: str, where: str = "true") -> str:
    return ", ".join(
        f"CAST(approx_quantile({value}, {q}) FILTER (WHERE {where}) AS BIGINT) AS {prefix}_{name}_ms"
        for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
    )


def _tables(day: date, now_ms: int) -> dict[str, str]:
    """table -> the query of its rows (columns in the job's order, `dt` last)."""
    d = day.isoformat()
    return {
        "topic_hourly": _topic_hourly(),
        "group_hourly": _group_hourly(day, now_ms),
        "delay_daily": f"""
            SELECT topic, {", ".join(_count(event, column) for event, column in DELAY_EVENTS.items())},
                   {_percentiles("lateness_ms", "lateness", "event = 'delay_fired'")}, dt
            FROM event_window WHERE in_day AND event IN ({sql_in(DELAY_EVENTS)}) GROUP BY topic, dt""",
        "transaction_daily": _transaction_daily(),
        "message_journey": _message_journey(),
        "push_hourly": _push_hourly(),
        "audit_daily": _audit_daily(),
        "data_quality": data_quality(day),
        "quarantine": f"""
            SELECT raw, reason,
                   CASE WHEN reason = 'unknown_event' THEN 'event ' || coalesce(e.event, '?')
                        WHEN reason = 'missing_field' THEN 'missing ' || array_to_string(
                            CASE WHEN e.ts IS NULL AND NOT list_contains(missing, 'ts')
                                 THEN list_append(missing, 'ts') ELSE missing END, ', ') END AS detail,
                   source_file, folder_dt AS dt
            FROM parsed WHERE reason IS NOT NULL AND folder_dt = '{d}'""",
    }


def _topic_hourly() -> str:
    return """
        WITH scheduled AS (
            SELECT DISTINCT message_id, true AS scheduled FROM event_window WHERE event = 'delay_scheduled'
        )
        SELECT topic, hour::TIMESTAMPTZ AS hour, count(*) FILTER (WHERE event = 'sent') AS sent,
               CAST(coalesce(sum(coalesce(size, 0)) FILTER (WHERE event = 'sent'), 0) AS BIGINT) AS bytes_sent,
               count(*) FILTER (WHERE event = 'sent' AND (coalesce(scheduled, false) OR coalesce(delay_ms, 0) > 0))
                   AS delayed,
               count(*) FILTER (WHERE event = 'transaction_half') AS transactional,
               strftime(hour, '%Y-%m-%d') AS dt
        FROM event_window LEFT JOIN scheduled USING (message_id)
        WHERE in_day AND event IN ('sent', 'transaction_half')
        GROUP BY topic, hour"""


def _latencies(reached: str, prefix: str) -> str:
    """(group, topic, hour reached) -> p50/p95/p99 from the start (the send, or the due time) to `reached`."""
    at = f"make_timestamp(p.{reached} * 1000)"
    return f"""
        SELECT p."group", p.group_topic AS topic, date_trunc('hour', {at}) AS hour,
               {_percentiles(f"p.{reached} - coalesce(s.due_ts, s.sent_ts)", prefix)}
        FROM progress p JOIN sends s USING (message_id)
        WHERE p.{reached} IS NOT NULL AND strftime({at}, '%Y-%m-%d') IN (SELECT dt FROM day)
        GROUP BY ALL"""


def _group_hourly(day: date, now_ms: int) -> str:
    """The counts, the latencies and the lag, a row per key of any of them (each has a row per key at most)."""
    counts = ", ".join(_count(event) for event in GROUP_EVENTS)
    filled = ", ".join(f"coalesce(max({event}), 0) AS {event}" for event in GROUP_EVENTS)
    latencies = ", ".join(
        f"max({kind}_{p}_ms) AS {kind}_{p}_ms" for kind in ("delivery", "ack") for p in ("p50", "p95", "p99")
    )
    return f"""
        WITH day AS (SELECT DISTINCT dt FROM event_window WHERE in_day),
        counts AS (
            SELECT "group", {OWN_TOPIC} AS topic, hour, {counts}
            FROM {WITH_OWN_TOPIC}
            WHERE in_day AND event IN ({sql_in(GROUP_EVENTS)}) AND "group" IS NOT NULL
            GROUP BY ALL
        ),
        delivery AS ({_latencies("delivered_ts", "delivery")}),
        ack AS ({_latencies("acked_ts", "ack")}),
        lag AS ({hourly_lag(day, now_ms)}),
        stacked AS (
            FROM counts UNION ALL BY NAME FROM delivery UNION ALL BY NAME FROM ack UNION ALL BY NAME FROM lag
        )
        SELECT "group", topic, hour::TIMESTAMPTZ AS hour, {filled}, {latencies}, coalesce(max(lag_end), 0) AS lag_end,
               max(oldest_unacked_age_ms) AS oldest_unacked_age_ms, strftime(hour, '%Y-%m-%d') AS dt
        FROM stacked GROUP BY "group", topic, hour"""


def _transaction_daily() -> str:
    by = ", ".join(
        f"count(*) FILTER (WHERE event = 'transaction_{end}' AND \"by\" = '{who}') AS {end}s_by_{who}"
        for end in ("commit", "rollback")
        for who in ENDERS
    )
    return f"""
        SELECT topic, {_count("transaction_half", "halves")}, {_count("transaction_commit", "commits")},
               {_count("transaction_rollback", "rollbacks")}, {by}, {_count("transaction_abandoned", "abandoned")},
               {_count("transaction_check", "checks")},
               {_percentiles("latency_ms", "check_latency", "event = 'transaction_check'")}, dt
        FROM event_window WHERE in_day AND event IN ({sql_in(TRANSACTION_EVENTS)}) GROUP BY topic, dt"""


def _push_hourly() -> str:
    outcomes = ", ".join(f"count(*) FILTER (WHERE outcome = '{outcome}') AS {outcome}" for outcome in OUTCOMES)
    statuses = ", ".join(
        f"count(*) FILTER (WHERE status BETWEEN {int(name[0]) * 100} AND {int(name[0]) * 100 + 99}) AS status_{name}"
        for name in STATUS_CLASSES
    )
    return f"""
        SELECT "group", {OWN_TOPIC} AS topic, endpoint, hour::TIMESTAMPTZ AS hour, count(*) AS attempts,
               count(DISTINCT message_id) AS messages, {outcomes}, count(*) FILTER (WHERE status IS NULL) AS no_answer,
               {statuses}, {_percentiles("latency_ms", "latency", "status IS NOT NULL")},
               max(delivery_attempt) AS max_delivery_attempt, strftime(hour, '%Y-%m-%d') AS dt
        FROM {WITH_OWN_TOPIC} WHERE in_day AND event = 'push_attempt'
        GROUP BY ALL"""


def _audit_daily() -> str:
    """Each top_* list: the values of a field with their calls in the row, sorted by calls (descending), value."""
    grain = ", ".join([*(quoted(key) for key in AUDIT_KEYS), "dt"])
    counted = ", ".join(f"count(*) OVER (PARTITION BY {grain}, {field}) AS {field}_calls" for field in TOP_LISTS)
    tops = ", ".join(
        f"list_transform(coalesce(list_sort(list(DISTINCT {{'rank': -{field}_calls, 'value': {field}}}) "
        f"FILTER (WHERE {field} IS NOT NULL))[1:{TOP}], []), lambda entry: entry.value) AS {column}"
        for field, column in TOP_LISTS.items()
    )
    return f"""
        WITH audit AS (
            SELECT *, CASE WHEN path IS NOT NULL THEN concat_ws(' ', method, path) END AS request
            FROM event_window WHERE in_day AND event = 'audit'
        ), counted AS (SELECT *, {counted} FROM audit)
        SELECT {", ".join(quoted(key) for key in AUDIT_KEYS)}, count(*) AS calls, count(DISTINCT remote) AS remotes,
               make_timestamp(min(ts) * 1000)::TIMESTAMPTZ AS first_at,
               make_timestamp(max(ts) * 1000)::TIMESTAMPTZ AS last_at, {tops}, dt
        FROM counted GROUP BY {grain}"""


def _message_journey() -> str:
    def at(ms: str) -> str:
        return f"make_timestamp({ms} * 1000)::TIMESTAMPTZ"

    sent_day = "strftime(make_timestamp(s.sent_ts * 1000), '%Y-%m-%d')"
    return f"""
        SELECT s.message_id, coalesce(s.topic, p.group_topic) AS topic, p."group", {at("s.sent_ts")} AS sent_at,
               {at("s.due_ts")} AS due_at, {at("p.delivered_ts")} AS first_delivered_at,
               {at("p.acked_ts")} AS acked_at, {at("p.dead_lettered_ts")} AS dead_lettered_at,
               CAST(coalesce(p.attempts, 0) AS INTEGER) AS attempts,
               CASE WHEN p.acked_ts IS NOT NULL THEN 'acked'
                    WHEN p.dead_lettered_ts IS NOT NULL AND p.redriven_ts >= p.dead_lettered_ts THEN 'redriven'
                    WHEN p.dead_lettered_ts IS NOT NULL THEN 'dead_lettered'
                    WHEN p.delivered_ts IS NOT NULL THEN 'in_flight'
                    WHEN s.rolled_back THEN 'rolled_back'
                    ELSE 'not_delivered' END AS final_state,
               {sent_day} AS dt
        FROM sends s LEFT JOIN progress p USING (message_id)
        WHERE {sent_day} IN (SELECT DISTINCT dt FROM event_window WHERE in_day)"""


def main(argv: list[str] | None = None) -> None:
    """`python -m bench.etl_reference EVENTS OUT DAY`: one timed run in a process of its own; JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m bench.etl_reference", description=main.__doc__)
    parser.add_argument("events", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("day", type=date.fromisoformat)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--memory-limit", default=None)
    args = parser.parse_args(argv)
    con = connect(args.threads, args.memory_limit, spill=args.out.parent / f"{args.out.name}-spill")
    started = time.perf_counter()
    rows = daily_figures(con, args.events, args.out, args.day)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux counts KiB
    print(json.dumps({"seconds": seconds, "rows": rows, "max_rss_bytes": peak}))


if __name__ == "__main__":
    main()
