"""How `petrel bench etl`'s DuckDB reference reads a day's event files (bench.etl_reference): every line of the
day's folder and its neighbours' as text, a batch line as one event per item (as `events_of` makes them), each event
parsed against the contract (`libs.events.contract`, with the job's field types) and quarantined for the job's reasons.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import date
from pathlib import Path

import duckdb

from libs.events.contract import BATCH, COMMON_FIELDS, EVENTS
from services.etl.events import (
    BOOLEAN_FIELDS,
    LONG_FIELDS,
    STRING_LIST_FIELDS,
    contract_fields,
    folder_days,
)

JSON_TYPES = {"BIGINT": ("BIGINT", "UBIGINT", "NULL"), "BOOLEAN": ("BOOLEAN", "NULL"), "VARCHAR[]": ("ARRAY", "NULL")}
"""What JSON a field of each type may hold (the job's from_json takes anything as a string)."""


def quoted(name: str) -> str:
    return f'"{name}"'


def _duck_type(name: str) -> str:
    if name in LONG_FIELDS:
        return "BIGINT"
    if name in BOOLEAN_FIELDS:
        return "BOOLEAN"
    if name in STRING_LIST_FIELDS:
        return "VARCHAR[]"
    return "VARCHAR"


def _wrong_type() -> tuple[str, str]:
    """(the json_type of each typed field, in order, as `types`; a typed field holding JSON of another type)."""
    typed = [name for name in contract_fields() if _duck_type(name) in JSON_TYPES]
    checks = []
    for index, name in enumerate(typed, start=1):
        allowed = ", ".join(f"'{t}'" for t in JSON_TYPES[_duck_type(name)])
        checks.append(f"types[{index}] NOT IN ({allowed})")
    paths = ", ".join(f"'$.{name}'" for name in typed)
    return f"json_type(event, [{paths}])", " OR ".join(checks)


def _required() -> str:
    pairs = ", ".join(
        f"'{name}': [{', '.join(repr(f) for f in sorted(spec.required | set(COMMON_FIELDS)))}]"
        for name, spec in sorted(EVENTS.items())
    )
    return f"MAP {{{pairs}}}"


def _batch_events() -> str:
    """CTE `events`: a row per event of each line, `event` its JSON and `keys_present` its fields (`events_of`).

    A batch line gives one row per item, the line's fields patched by the item's (an item's field wins;
    an item's null removes the line's, which reads as the same null); a plain line, itself.
    """
    return f"""items AS (
            SELECT *, CASE WHEN is_object AND json_type(raw, '$.{BATCH}') = 'ARRAY'
                           THEN json_extract(raw, '$.{BATCH}[*]') END AS items
            FROM objects
        ), events AS (
            SELECT folder_dt, raw, source_file, is_object,
                   CASE WHEN items IS NULL THEN raw
                        ELSE json_merge_patch(json_merge_patch(raw, '{{"{BATCH}": null}}'), item)::VARCHAR END AS event,
                   CASE WHEN items IS NULL AND is_object THEN json_keys(raw)
                        WHEN is_object THEN list_distinct(list_concat(
                            list_filter(json_keys(raw), lambda k: k <> '{BATCH}'), json_keys(item))) END AS keys_present
            FROM items, unnest(coalesce(items, [NULL::JSON])) AS unnested(item)
        )"""


def read_events(con: duckdb.DuckDBPyConnection, events: Path, day: date, lookback_days: int) -> None:
    """`parsed` (every non-blank line read, its quarantine reason, and its text if quarantined), `event_window`."""
    folders = [events / f"dt={d.isoformat()}" for d in folder_days(day, lookback_days)]
    globs = [str(folder / "**" / "*.jsonl") for folder in folders if folder.is_dir()]
    structure = json.dumps({name: _duck_type(name) for name in contract_fields()})
    types, wrong = _wrong_type()
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE parsed AS
        WITH lines AS (
            SELECT raw, filename AS source_file,
                   regexp_extract(filename, 'dt=(\\d{{4}}-\\d{{2}}-\\d{{2}})', 1) AS folder_dt
            FROM read_csv({globs!r}, columns = {{'raw': 'VARCHAR'}}, delim = '\x01', quote = '', escape = '',
                          header = false, auto_detect = false, filename = true)
            WHERE raw IS NOT NULL AND trim(raw) <> ''
        ), objects AS (
            SELECT *, TRY(json_type(raw)) = 'OBJECT' AS is_object FROM lines
        ), {_batch_events()}, typed AS (
            SELECT folder_dt, raw, source_file, keys_present,
                   CASE WHEN is_object THEN json_transform(event, '{structure}') END AS e,
                   CASE WHEN is_object THEN {types} END AS types
            FROM events
        ), checked AS (
            SELECT *, list_filter({_required()}[e.event], lambda f: NOT list_contains(keys_present, f)) AS missing
            FROM typed
        ), reasoned AS (
            SELECT *,
                   CASE WHEN keys_present IS NULL THEN 'malformed_json'
                        WHEN {wrong} THEN 'wrong_type'
                        WHEN e.event IS NULL OR e.event NOT IN ({sql_in(EVENTS)}) THEN 'unknown_event'
                        WHEN len(missing) > 0 OR e.ts IS NULL THEN 'missing_field'
                   END AS reason
            FROM checked
        )
        SELECT folder_dt, e, reason,
               CASE WHEN reason IS NOT NULL THEN missing END AS missing,
               CASE WHEN reason IS NOT NULL THEN raw END AS raw,
               CASE WHEN reason IS NOT NULL THEN source_file END AS source_file
        FROM reasoned
    """)
    columns = ", ".join(f"e.{quoted(name)} AS {quoted(name)}" for name in contract_fields())
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE event_window AS
        SELECT *, date_trunc('hour', "at") AS hour, folder_dt <> dt AS late, dt = '{day.isoformat()}' AS in_day
        FROM (SELECT *, strftime("at", '%Y-%m-%d') AS dt
              FROM (SELECT folder_dt, {columns}, make_timestamp(e.ts * 1000) AS "at" FROM parsed WHERE reason IS NULL))
    """)


def sql_in(names: Iterable[str]) -> str:
    return ", ".join(f"'{name}'" for name in names)
