"""Message filters a consumer subscribes with: RocketMQ's TAG and SQL92 expressions.

The broker asks a filter twice per message, as RocketMQ does: `matches_code`
on the tag hash code a ConsumeQueue unit carries (cheap, no CommitLog read),
then `matches` on the message itself for those that pass. A TAG filter decides
almost everything from the code; an SQL92 filter cannot, so it passes every
code and decides on the message.

    filter = compile_filter(FilterType.SQL92, "a > 5 AND TAGS IN ('x', 'y')")
    filter.matches(record.tag, record.properties)

`compile_filter` is cached (an LRU of COMPILED_KEPT filters): a consumer group's
expression is compiled once per process, not once per pull. What an expression may
hold is bounded by `FilterLimits` (libs.filters.limits); a service passes its own.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from typing import Final, Protocol

from libs.errors import InvalidFilter
from libs.filters.limits import DEFAULT_LIMITS, MAX_EXPRESSION_LENGTH, FilterLimits
from libs.filters.sql92 import Sql92Filter
from libs.filters.tag import TagFilter

__all__ = [
    "ACCEPT_ALL",
    "COMPILED_KEPT",
    "MAX_EXPRESSION_LENGTH",
    "FilterLimits",
    "FilterType",
    "MessageFilter",
    "compile_filter",
]

COMPILED_KEPT: Final = 1024
"""Compiled filters kept per process, the least recently used dropped first."""


class FilterType(enum.StrEnum):
    TAG = "TAG"
    SQL92 = "SQL92"


class MessageFilter(Protocol):
    """Which messages a subscription wants."""

    @property
    def expression(self) -> str: ...

    def matches_code(self, tags_code: int) -> bool:
        """False only if no message with this tag hash code can match."""
        ...

    def matches(self, tag: str | None, properties: Mapping[str, str]) -> bool:
        """Whether the message with this tag and these properties matches."""
        ...


ACCEPT_ALL: Final[MessageFilter] = TagFilter.parse("*")


def compile_filter(kind: FilterType | str, expression: str, limits: FilterLimits = DEFAULT_LIMITS) -> MessageFilter:
    """The filter for a subscription; raises InvalidFilter for a bad type or expression, or one past `limits`."""
    try:
        filter_type = FilterType(kind.upper())
    except ValueError:
        raise InvalidFilter(f"filter type {kind!r} is not TAG or SQL92") from None
    if len(expression) > limits.max_length:
        raise InvalidFilter(
            f"{filter_type} expression is {len(expression)} characters long, more than {limits.max_length}"
        )
    return _compiled(filter_type, expression, limits)


@functools.lru_cache(maxsize=COMPILED_KEPT)
def _compiled(filter_type: FilterType, expression: str, limits: FilterLimits) -> MessageFilter:
    if filter_type is FilterType.SQL92:
        return Sql92Filter.parse(expression, limits)
    parsed = TagFilter.parse(expression)
    return ACCEPT_ALL if parsed.accepts_all else parsed
