"""TAG filters: `TagA || TagB`, or `*` for every message (RocketMQ's subscription string).

A TAG filter is decided twice, as RocketMQ does: first on the 8-byte tag hash
code a ConsumeQueue unit carries, without reading the CommitLog; then on the
message itself, because two tags may share a code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from libs.errors import InvalidFilter
from libs.message import tags_code

SUBSCRIBE_ALL = "*"
TAG_SEPARATOR = "||"


@dataclass(frozen=True, slots=True)
class TagFilter:
    """Messages whose tag is one of `tags`; every message when `accepts_all`."""

    expression: str
    tags: frozenset[str]
    codes: frozenset[int]
    accepts_all: bool = False

    @classmethod
    def parse(cls, expression: str) -> TagFilter:
        """The filter for a subscription string; `*` or an empty one accepts all messages."""
        if expression.strip() in ("", SUBSCRIBE_ALL):
            return cls(expression, frozenset(), frozenset(), accepts_all=True)
        tags = frozenset(part.strip() for part in expression.split(TAG_SEPARATOR) if part.strip())
        if not tags:
            raise InvalidFilter(f"TAG expression {expression!r} names no tag")
        return cls(expression, tags, frozenset(tags_code(tag) for tag in tags))

    def matches_code(self, tags_code: int) -> bool:
        return self.accepts_all or tags_code in self.codes

    def matches(self, tag: str | None, properties: Mapping[str, str]) -> bool:
        return self.accepts_all or tag in self.tags
