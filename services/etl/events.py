"""EventLog: one day's lifecycle events, read with one explicit schema, good rows apart from quarantined lines.

The input is the contract of `libs.events.contract`: JSON lines under
`<events>/dt=YYYY-MM-DD/hour=HH/`. Every line is read as text and parsed with
`from_json` in PERMISSIVE mode against one schema holding every field of every
event (all nullable), so the raw line stays at hand for the quarantine. A line is
quarantined when it is not a JSON object (`malformed_json`), when a field has the
wrong type (`wrong_type`), when its event is not in the contract (`unknown_event`)
or when a field the event requires is absent (`missing_field`; a required field
may be null, the contract says so, but it must be there).

A batch line (the contract's `batch` list: the events of one call, their shared fields
once) is read as the events it holds, each checked as a plain line would be; its
quarantined events keep the whole line as `raw`, and their detail says which item. So a
day's rows are the same whichever form its files were written in; `lines read` counts
events too, a batch line once per item.

An event belongs to the day of its `ts` (UTC), whatever folder it was written to:
the folders of `lookback_days` days either side of D are read too and their D
events kept. A quarantined line has no trustworthy `ts`, so it belongs to the day
of its folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BooleanType, DataType, LongType, StringType, StructField, StructType

from libs.events.contract import BATCH, COMMON_FIELDS, EVENTS
from services.etl.storage import exists

CORRUPT = "_corrupt_record"
LONG_FIELDS = frozenset(
    [
        "ts",
        "pid",
        "size",
        "delay_ms",
        "queue_id",
        "queue_offset",
        "physical_offset",
        "delivery_attempt",
        "deliver_at",
        "delay_level",
        "roll_times",
        "lateness_ms",
        "attempts",
        "check_count",
        "latency_ms",
        "status",
    ]
)
BOOLEAN_FIELDS = frozenset({"durable"})
STRING_LIST_FIELDS = frozenset({"keys"})
"""Every other field of the contract is a string."""

TABLE_FIELDS = (
    *("ts", "event", "message_id", "topic", "group", "by", "reason", "size", "delay_ms", "deliver_at"),
    *("delivery_attempt", "lateness_ms", "latency_ms", "endpoint", "status", "outcome"),
    *("action", "key_id", "key_name", "operation", "method", "path", "resource", "remote"),
)
"""The contract's fields the tables read: the window keeps only these (every field is still parsed and checked)."""
PROBLEM = "quarantined_for"
"""A line's quarantine reason while it is read (the quarantine's `reason`; a `dead_lettered` has a `reason` too)."""

QUARANTINE_REASONS = ("malformed_json", "wrong_type", "unknown_event", "missing_field")


def contract_fields() -> list[str]:
    """Every field of every event: the common ones first, then the rest by name."""
    rest = {name for spec in EVENTS.values() for name in spec.fields} - set(COMMON_FIELDS)
    return [*COMMON_FIELDS, *sorted(rest)]


def event_schema() -> StructType:
    """The one read schema: all fields of all events, nullable, and the corrupt-record column."""
    fields = [StructField(name, _field_type(name), nullable=True) for name in contract_fields()]
    return StructType([*fields, StructField(CORRUPT, StringType(), nullable=True)])


def _field_type(name: str) -> DataType:
    if name in LONG_FIELDS:
        return LongType()
    if name in BOOLEAN_FIELDS:
        return BooleanType()
    if name in STRING_LIST_FIELDS:
        return ArrayType(StringType())
    return StringType()


def folder_days(day: date, lookback_days: int) -> list[date]:
    return [day + timedelta(days=n) for n in range(-lookback_days, lookback_days + 1)]


@dataclass(frozen=True, slots=True)
class EventLog:
    """The events of one day: `window` (the tables' fields of the contract, `hour`, `dt`, `folder_dt`, `late`,
    `in_day`), `quarantine` (dt, raw, reason, detail, source_file) and `lines` (D's own folder's)."""

    day: date
    window: DataFrame
    """Every good event read, whatever its day: sends of earlier days for latencies, deliveries of later ones."""
    quarantine: DataFrame
    lines: DataFrame
    """One row per line of D's own folder (folder_dt == D), a batch line's per event: what `lines read` counts."""
    source: DataFrame
    """Every line read, parsed and checked (cached: the window, the quarantine and the lines are views of it)."""
    kept: list[DataFrame] = field(default_factory=list)
    """What the tables cached of the window (`keep`), dropped with it."""

    @property
    def events(self) -> DataFrame:
        return self.window.where("in_day")

    def keep(self, frame: DataFrame) -> DataFrame:
        """`frame`, cached until `release`: a frame of the window that several tables read."""
        self.kept.append(frame.persist(StorageLevel.MEMORY_AND_DISK))
        return frame

    def release(self) -> None:
        """Drop what reading and the tables cached: a long-lived session (a scheduler's) runs day after day."""
        for frame in (*self.kept, self.source):
            frame.unpersist()
        self.kept.clear()


def read_event_log(spark: SparkSession, events_uri: str, day: date, lookback_days: int) -> EventLog:
    """Read D's folder and its neighbours' (those that exist), split good rows from quarantined lines.

    Each line is parsed and checked once, into one cached frame the window, the quarantine and
    the lines are all views of: it keeps the fields the tables read, and a line's raw text and
    file only when the line is quarantined (the raw text is most of the input's bytes).
    """
    paths = [uri for uri in (_folder(events_uri, d) for d in folder_days(day, lookback_days)) if exists(spark, uri)]
    read = _checked(_read_lines(spark, paths), day).persist(StorageLevel.MEMORY_AND_DISK)
    good = read.where(F.col(PROBLEM).isNull()).drop(PROBLEM, "detail", "raw", "source_file")
    bad = read.where(F.col(PROBLEM).isNotNull() & (F.col("folder_dt") == day.isoformat()))
    quarantine = bad.select(
        F.col("folder_dt").alias("dt"), "raw", F.col(PROBLEM).alias("reason"), "detail", "source_file"
    )
    own = read.where(F.col("folder_dt") == day.isoformat())
    return EventLog(day=day, window=good, quarantine=quarantine, lines=own, source=read)


def _checked(lines: DataFrame, day: date) -> DataFrame:
    """Every event, parsed: its quarantine reason (`PROBLEM`, null for a good event) and detail, the fields of
    `TABLE_FIELDS`, the window's day columns; `raw` and `source_file` only on a quarantined event."""
    checked = _events(lines).withColumn("reason", _reason()).withColumn("detail", _detail())
    of_batch = F.col("batch_item").isNotNull() & F.col("reason").isNotNull()
    at_item = F.concat_ws("; ", "detail", F.concat(F.lit("batch item "), F.col("batch_item")))
    checked = checked.withColumn("detail", F.when(of_batch, at_item).otherwise(F.col("detail")))
    quarantined = F.col("reason").isNotNull()
    checked = checked.select(
        "folder_dt",
        F.col("reason").alias(PROBLEM),
        "detail",
        F.when(quarantined, F.col("raw")).alias("raw"),
        F.when(quarantined, F.col("source_file")).alias("source_file"),
        *(F.col(f"event_row.{name}").alias(name) for name in TABLE_FIELDS),
    )
    at = F.timestamp_millis("ts")
    checked = checked.withColumn("dt", F.date_format(at, "yyyy-MM-dd")).withColumn("hour", F.date_trunc("hour", at))
    checked = checked.withColumn("late", F.col("folder_dt") != F.col("dt"))
    return checked.withColumn("in_day", F.col("dt") == F.lit(day.isoformat()))


def _events(lines: DataFrame) -> DataFrame:
    """One row per event: a plain line's, or each of a batch line's (`libs.events.contract`), as `event_row` (the
    read schema's fields; a batch item's own, else its line's) and `keys_present` (the fields the event has).

    A batch line is parsed with its items as text (`batch` as array<string>), then each item: a field of the
    wrong type in the line's fields makes every event of the line `wrong_type`, in an item only that one.
    """
    line_schema = StructType([*event_schema().fields[:-1], StructField(BATCH, ArrayType(StringType()))])
    line_schema = line_schema.add(StructField(CORRUPT, StringType(), nullable=True))
    parsed = lines.withColumn("line", F.from_json("raw", line_schema, {"mode": "PERMISSIVE"}))
    parsed = parsed.withColumn("line_keys", F.json_object_keys("raw"))
    parsed = parsed.select("*", F.posexplode_outer(f"line.{BATCH}").alias("batch_item", "item"))
    parsed = parsed.withColumn("item_row", F.from_json("item", event_schema(), {"mode": "PERMISSIVE"}))
    parsed = parsed.withColumn("item_keys", F.json_object_keys("item"))
    plain = F.col("item").isNull()
    own = [*dict.fromkeys([*COMMON_FIELDS, *TABLE_FIELDS])]
    fields = [
        F.when(~plain & F.array_contains("item_keys", name), F.col(f"item_row.{name}"))
        .otherwise(F.col(f"line.{name}"))
        .alias(name)
        for name in own
    ]
    corrupt = F.coalesce(F.col(f"item_row.{CORRUPT}"), F.col(f"line.{CORRUPT}")).alias(CORRUPT)
    keys = F.when(plain, F.col("line_keys")).otherwise(
        F.array_union(F.array_remove("line_keys", BATCH), F.col("item_keys"))
    )
    return parsed.select(
        "raw",
        "source_file",
        "folder_dt",
        "batch_item",
        F.struct(*fields, corrupt).alias("event_row"),
        keys.alias("keys_present"),
    )


def _folder(events_uri: str, day: date) -> str:
    return f"{events_uri.rstrip('/')}/dt={day.isoformat()}"


def _read_lines(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Raw lines with their file and their folder's day; blank lines are not lines."""
    if not paths:
        schema = StructType([StructField(name, StringType()) for name in ("raw", "source_file", "folder_dt")])
        return spark.createDataFrame([], schema)
    text = spark.read.option("recursiveFileLookup", "true").option("pathGlobFilter", "*.jsonl").text(paths)
    text = text.select(F.col("value").alias("raw"), F.input_file_name().alias("source_file"))
    text = text.where(F.trim("raw") != "")
    return text.withColumn("folder_dt", F.regexp_extract("source_file", r"dt=(\d{4}-\d{2}-\d{2})", 1))


def _required() -> Column:
    """event name -> the fields it must carry (the common ones too)."""
    pairs = []
    for name, spec in sorted(EVENTS.items()):
        fields = sorted(spec.required | set(COMMON_FIELDS))
        pairs += [F.lit(name), F.array(*(F.lit(f) for f in fields))]
    return F.create_map(*pairs)


def _missing() -> Column:
    return F.array_except(F.element_at(_required(), F.col("event_row.event")), F.col("keys_present"))


def _reason() -> Column:
    return (
        F.when(F.col("keys_present").isNull(), F.lit("malformed_json"))
        .when(F.col(f"event_row.{CORRUPT}").isNotNull(), F.lit("wrong_type"))
        .when(~F.col("event_row.event").isin(*EVENTS), F.lit("unknown_event"))
        .when(F.col("event_row.event").isNull(), F.lit("unknown_event"))
        .when((F.size(_missing()) > 0) | F.col("event_row.ts").isNull(), F.lit("missing_field"))
    )


def _null_ts() -> Column:
    """A line with no time cannot be given a day: a null `ts` counts as missing."""
    return F.when(F.col("event_row.ts").isNull(), F.array(F.lit("ts"))).otherwise(F.array().cast("array<string>"))


def _detail() -> Column:
    return (
        F.when(F.col("reason") == "unknown_event", F.concat(F.lit("event "), F.coalesce("event_row.event", F.lit("?"))))
        .when(
            F.col("reason") == "missing_field",
            F.concat(F.lit("missing "), F.array_join(F.array_union(_missing(), _null_ts()), ", ")),
        )
        .otherwise(F.lit(None).cast("string"))
    )
