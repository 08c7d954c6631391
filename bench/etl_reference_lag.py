"""group_hourly's lag in DuckDB: `services.etl.lag` in SQL, for `bench.etl_reference`.

The same semantics as the job's, step for step (that module's docstring says which
messages wait and from when): a (message, group) pair with a group event waits from its
availability (the due time, the commit, the send, else its first group event; never when
rolled back) until its first ack or its dead-lettering, and again from a redrive after
the dead-lettering until an ack. Each wait is counted at every hour end of D it spans,
up to the hour holding the run's time; `oldest_unacked_age_ms` is the hour's end (the
run's time, for the hour it runs in) minus the earliest availability among the waiting.
It reads the `progress` and `sends` tables `bench.etl_reference` makes.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time

from services.etl.lag import HOUR_MS

STILL = 2**62
"""A wait not over: later than any hour end."""


def hourly_lag(day: date, now_ms: int) -> str:
    """The query of (group, topic, hour of D) -> lag_end, oldest_unacked_age_ms, for every hour ending with a wait."""
    day_ms = int(datetime.combine(day, time(), tzinfo=UTC).timestamp() * 1000)
    last_hour_end = min(day_ms + 24 * HOUR_MS, (now_ms // HOUR_MS + 1) * HOUR_MS)
    return f"""
        WITH pairs AS (
            SELECT p."group", coalesce(s.topic, p.group_topic) AS topic,
                   coalesce(s.due_ts, s.committed_ts, s.sent_ts,
                            least(p.delivered_ts, p.acked_ts, p.dead_lettered_ts, p.redriven_ts)) AS available_ts,
                   p.acked_ts, p.dead_lettered_ts, p.redriven_ts
            FROM progress p LEFT JOIN sends s USING (message_id)
            WHERE NOT coalesce(s.rolled_back, false)
        ), waits AS (
            SELECT "group", topic, available_ts, available_ts AS from_ts,
                   least(acked_ts, dead_lettered_ts) AS until_ts
            FROM pairs
            UNION ALL
            SELECT "group", topic, available_ts, redriven_ts AS from_ts, acked_ts AS until_ts
            FROM pairs
            WHERE redriven_ts >= coalesce(dead_lettered_ts, 0) AND redriven_ts < coalesce(acked_ts, {STILL})
        ), hour_ends_of_d AS (
            -- greatest() skips a null start, as Spark's does: a pair with no time to start from waits all D
            SELECT "group", topic, available_ts,
                   greatest(from_ts // {HOUR_MS} * {HOUR_MS} + {HOUR_MS}, {day_ms + HOUR_MS}) AS first_end,
                   least(coalesce(until_ts // {HOUR_MS} * {HOUR_MS}, {STILL}), {last_hour_end}) AS last_end
            FROM waits
        ), waiting_at_end AS (
            SELECT "group", topic, available_ts, unnest(generate_series(first_end, last_end, {HOUR_MS})) AS end_ms
            FROM hour_ends_of_d WHERE first_end <= last_end
        )
        SELECT "group", topic, make_timestamp((end_ms - {HOUR_MS}) * 1000) AS hour, count(*) AS lag_end,
               least(max(end_ms), {now_ms}) - min(available_ts) AS oldest_unacked_age_ms
        FROM waiting_at_end GROUP BY "group", topic, end_ms"""
