"""Delay levels and the properties that carry a scheduled message's real destination.

RocketMQ's 18 levels by default: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m
30m 1h 2h (level 1 is the first). A level message is stored in
`SCHEDULE_TOPIC_XXXX`, queue = level - 1; an exact-time message in the timer
topic. Both keep the real topic and queue in REAL_TOPIC / REAL_QID and their
due time in TIMER_DELIVER_MS, which the ConsumeQueue keeps in its tag slot.

The table is one cluster-wide setting, `PETREL_DELAY_LEVELS` (see
libs.settings.DelayLevelSettings): the gateway checks a level against it, the
broker turns a level into a due time with it, the timer reports pending
messages by it, so all must read the same one. `DelayLevelTable` is its type
in a settings class: written '1s 5s 1m ...', parsed and validated once, when
the settings are read, into each level's delay in milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Annotated, Final

from pydantic import BeforeValidator
from pydantic_settings import NoDecode

from libs.errors import InvalidMessage
from libs.message import MessageRecord, Prop
from libs.names import SCHEDULE_TOPIC, TIMER_TOPIC

DEFAULT_DELAY_LEVELS: Final = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LEVEL = re.compile(r"(\d+)(ms|s|m|h|d)")
SCHEDULING_PROPERTIES: Final = frozenset(
    {Prop.REAL_TOPIC, Prop.REAL_QUEUE_ID, Prop.DELAY_LEVEL, Prop.TIMER_DELIVER_MS, Prop.TIMER_ROLL_TIMES}
)


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """'1s 5s 1m ...' -> each level's delay in milliseconds (index 0 is level 1)."""
    levels = []
    for part in text.split():
        match = _LEVEL.fullmatch(part)
        if match is None:
            raise ValueError(f"delay level {part!r} is not a number with ms, s, m, h or d")
        levels.append(int(match.group(1)) * _UNIT_MS[match.group(2)])
    if not levels:
        raise ValueError("at least one delay level is needed")
    return tuple(levels)


def _parse_text(value: object) -> object:
    return parse_delay_levels(value) if isinstance(value, str) else value


DelayLevelTable = Annotated[tuple[int, ...], NoDecode, BeforeValidator(_parse_text)]
"""The delay-level table as a settings field: each level's delay in ms, index 0 is level 1."""


def is_scheduled(properties: dict[str, str] | object) -> bool:
    """Does a record sent to a normal topic ask for later delivery?"""
    return isinstance(properties, dict) and (Prop.DELAY_LEVEL in properties or Prop.TIMER_DELIVER_MS in properties)


def to_schedule(record: MessageRecord, levels: tuple[int, ...], now_ms: int) -> MessageRecord:
    """The record as stored until due: in a delay queue or the timer topic, its destination in properties."""
    properties = dict(record.properties)
    properties[Prop.REAL_TOPIC] = record.topic
    properties[Prop.REAL_QUEUE_ID] = str(record.queue_id)
    level_text = properties.get(Prop.DELAY_LEVEL)
    if level_text is not None:
        if not (level_text.isascii() and level_text.isdigit()) or not 1 <= int(level_text) <= len(levels):
            raise InvalidMessage(f"delay level {level_text!r} is not between 1 and {len(levels)}")
        level = int(level_text)
        properties[Prop.TIMER_DELIVER_MS] = str(now_ms + levels[level - 1])
        return replace(record, topic=SCHEDULE_TOPIC, queue_id=level - 1, properties=properties)
    due = properties.get(Prop.TIMER_DELIVER_MS, "")
    if not (due.isascii() and due.isdigit()):
        raise InvalidMessage(f"{Prop.TIMER_DELIVER_MS} {due!r} is not a time in epoch milliseconds")
    return replace(record, topic=TIMER_TOPIC, queue_id=0, properties=properties)


def from_schedule(record: MessageRecord) -> MessageRecord:
    """The record as delivered: back in its real topic and queue, the scheduling properties gone."""
    real_topic = record.properties.get(Prop.REAL_TOPIC)
    real_queue = record.properties.get(Prop.REAL_QUEUE_ID, "")
    if real_topic is None or not (real_queue.isascii() and real_queue.isdigit()):
        raise InvalidMessage(f"the record at {record.physical_offset} carries no real topic and queue")
    properties = {k: v for k, v in record.properties.items() if k not in SCHEDULING_PROPERTIES}
    return replace(
        record,
        topic=real_topic,
        queue_id=int(real_queue),
        properties=properties,
        queue_offset=0,
        physical_offset=0,
        store_timestamp=0,
    )


def due_at(record: MessageRecord) -> int:
    return int(record.properties.get(Prop.TIMER_DELIVER_MS, "0"))
