"""data_quality in DuckDB: `services.etl.quality` in SQL, for `bench.etl_reference`.

The same rows as the job's: `lines_read`, `events`, `late_events`, `quarantined` once per
reason and `invariant` once per invariant (its count the events of D breaking it, 0
included); no `reconciliation` rows, as no CommitLog is read. It reads the `parsed` and
`event_window` tables `bench.etl_reference` makes.
"""

from __future__ import annotations

from datetime import date

from services.etl.events import QUARANTINE_REASONS
from services.etl.quality import INVARIANTS

BREACHES = {
    "rolled_back_delivered": "event = 'delivered' AND coalesce(rolled_back, false)",
    "ack_without_send": "event = 'acked' AND NOT coalesce(was_sent, false)",
    "dlq_without_reason": "event = 'dead_lettered' AND coalesce(trim(reason), '') = ''",
}
"""Each invariant of `services.etl.quality`: an event of D that breaks it (its message's marks joined to it)."""


def data_quality(day: date) -> str:
    """The query of D's measures: lines read, events, late events, quarantined lines per reason, invariants."""
    d = day.isoformat()
    reasons = ", ".join(f"'{reason}'" for reason in QUARANTINE_REASONS)
    return f"""
        SELECT 'lines_read' AS measure, NULL::VARCHAR AS detail,
               (SELECT count(*) FROM parsed WHERE folder_dt = '{d}') AS count, '{d}' AS dt
        UNION ALL SELECT 'events', NULL, (SELECT count(*) FROM event_window WHERE in_day), '{d}'
        UNION ALL SELECT 'late_events', NULL, (SELECT count(*) FROM event_window WHERE in_day AND late), '{d}'
        UNION ALL SELECT 'quarantined', r.reason, count(p.reason), '{d}'
        FROM (SELECT unnest([{reasons}]) AS reason) r
        LEFT JOIN parsed p ON p.reason = r.reason AND p.folder_dt = '{d}' GROUP BY r.reason
        UNION ALL SELECT 'invariant', invariant, breaches, '{d}' FROM ({_invariant_breaches()})"""


def _invariant_breaches() -> str:
    """(invariant, breaches): the events of D that break each invariant, 0 included."""
    counted = ", ".join(f"count(*) FILTER (WHERE {BREACHES[name]}) AS {name}" for name in INVARIANTS)
    return f"""
        WITH marks AS (
            SELECT message_id, bool_or(event = 'transaction_rollback') AS rolled_back,
                   bool_or(event IN ('sent', 'transaction_half')) AS was_sent
            FROM event_window GROUP BY message_id
        ), checked AS (
            SELECT event, reason, rolled_back, was_sent
            FROM event_window LEFT JOIN marks USING (message_id)
            WHERE in_day AND event IN ('delivered', 'acked', 'dead_lettered')
        ), counted AS (SELECT {counted} FROM checked)
        UNPIVOT counted ON {", ".join(INVARIANTS)} INTO NAME invariant VALUE breaches"""
