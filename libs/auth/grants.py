"""Permissions: what an API key may do, on which topics and groups (RocketMQ ACL 2.0's shape).

A grant is `<action>[:<pattern>]`:

    pub:orders*          publish to topics named orders*, and name producer groups so
    sub:billing          subscribe: receive, pull, ack, lag, DLQ read of topic or group billing
    sub:group/billing    the same, on the group billing only (topic/ narrows to topics)
    admin                administer everything: topics, groups, offsets, redrive, producer
                         groups, push subscriptions, timers, keys

The action is `pub` (publish), `sub` (subscribe) or `admin`; the pattern is a glob
(`*` any run of characters, `?` one) over names, `*` when left out. A key holds
allow grants and deny grants, and a deny that matches beats any allow. A grant
without a kind (no `topic/`, `group/`) matches topics and groups alike. What spans
the whole cluster (listing keys, timer stats) needs a grant whose pattern is `*`
and has no kind: `admin`, not `admin:orders*`.

Admin does not include publish or subscribe: a key that does all three says so.
"""

from __future__ import annotations

import enum
import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal

from libs.errors import InvalidRequest

ResourceKind = Literal["topic", "group", "cluster"]
KINDS: Final = ("topic", "group")
GLOB_CHARACTERS: Final = frozenset("*?[")
MAX_PATTERN_LENGTH: Final = 255
MAX_GRANTS: Final = 64


class Action(enum.StrEnum):
    PUBLISH = "pub"
    SUBSCRIBE = "sub"
    ADMIN = "admin"

    @property
    def verb(self) -> str:
        return {"pub": "publish to", "sub": "subscribe to", "admin": "administer"}[self.value]


_ACTION_NAMES: Final = {
    "pub": Action.PUBLISH,
    "publish": Action.PUBLISH,
    "sub": Action.SUBSCRIBE,
    "subscribe": Action.SUBSCRIBE,
    "admin": Action.ADMIN,
}


@dataclass(frozen=True, slots=True)
class Grant:
    action: Action
    kind: Literal["topic", "group"] | None
    pattern: str
    _regex: re.Pattern[str] = field(repr=False, compare=False)

    @classmethod
    def parse(cls, text: str) -> Grant:
        """`pub:orders*`, `sub:group/billing`, `admin`; InvalidRequest (400) saying what is wrong."""
        action_name, colon, rest = text.strip().partition(":")
        action = _ACTION_NAMES.get(action_name.lower())
        if action is None:
            raise InvalidRequest(f"grant {text!r}: the action must be pub, sub or admin (then :pattern)")
        if colon and not rest:
            raise InvalidRequest(f"grant {text!r}: nothing after the colon (leave it out for every name)")
        kind: Literal["topic", "group"] | None = None
        pattern = rest or "*"
        prefix, slash, name = pattern.partition("/")
        if slash and prefix in KINDS:
            kind = "topic" if prefix == "topic" else "group"
            pattern = name or "*"
        if len(pattern) > MAX_PATTERN_LENGTH or not pattern.strip():
            raise InvalidRequest(f"grant {text!r}: the pattern must be 1 to {MAX_PATTERN_LENGTH} characters")
        if any(c.isspace() for c in pattern):
            raise InvalidRequest(f"grant {text!r}: a pattern has no spaces")
        return cls(action, kind, pattern, re.compile(fnmatch.translate(pattern)))

    @property
    def unrestricted(self) -> bool:
        """Matches every name of every kind: what a cluster-wide call needs."""
        return self.kind is None and self.pattern == "*"

    def covers(self, action: Action, kind: ResourceKind, name: str) -> bool:
        if action is not self.action:
            return False
        if kind == "cluster":
            return self.unrestricted
        if self.kind is not None and self.kind != kind:
            return False
        return self.pattern == "*" or self._regex.match(name) is not None

    def within(self, outer: Grant, kind: ResourceKind) -> bool:
        """Every `kind` resource this grant covers, `outer` covers too (False when that cannot be decided)."""
        if self.action is not outer.action:
            return False
        if kind == "cluster":
            return self.unrestricted and outer.unrestricted
        return self.kind in (None, kind) and outer.kind in (None, kind) and pattern_within(self.pattern, outer.pattern)

    def __str__(self) -> str:
        where = f"{self.kind}/{self.pattern}" if self.kind else self.pattern
        return self.action.value if where == "*" else f"{self.action.value}:{where}"


def pattern_within(inner: str, outer: str) -> bool:
    """Every name `inner` matches, `outer` matches: the same pattern, or `outer` a literal prefix and `*`.

    `orders*` holds `orders-eu*`, `orders-eu` and `orders?`: their first characters are that
    literal prefix, so whatever they match starts with it. Any other pair is answered False,
    including some that do hold (`a?` and `?b` hold `ab`): a refusal, never a wrong yes.
    """
    if inner == outer:
        return True
    prefix = outer[:-1]
    return outer.endswith("*") and GLOB_CHARACTERS.isdisjoint(prefix) and inner.startswith(prefix)


def parse_grants(texts: Iterable[str]) -> tuple[Grant, ...]:
    grants = tuple(Grant.parse(text) for text in texts)
    if len(grants) > MAX_GRANTS:
        raise InvalidRequest(f"a key holds at most {MAX_GRANTS} grants of each kind (allow, deny)")
    return grants


@dataclass(frozen=True, slots=True)
class Policy:
    """A key's allow and deny grants: deny beats allow."""

    allow: tuple[Grant, ...]
    deny: tuple[Grant, ...] = ()

    @classmethod
    def parse(cls, allow: Iterable[str], deny: Iterable[str] = ()) -> Policy:
        return cls(parse_grants(allow), parse_grants(deny))

    def permits(self, action: Action, kind: ResourceKind, name: str = "*") -> bool:
        if any(grant.covers(action, kind, name) for grant in self.deny):
            return False
        return any(grant.covers(action, kind, name) for grant in self.allow)

    def covers_all(self, action: Action, kind: Literal["topic", "group"]) -> bool:
        """Permits `action` on every name of `kind`: an allow of `*` for it and no deny of the action on it."""
        if any(g.action is action and g.kind in (None, kind) for g in self.deny):
            return False
        return any(g.action is action and g.kind in (None, kind) and g.pattern == "*" for g in self.allow)

    def may_ever(self, action: Action) -> bool:
        """Holds some allow grant of `action` (a call whose resource is found later needs at least that)."""
        return any(grant.action is action for grant in self.allow)

    def grants_text(self) -> tuple[list[str], list[str]]:
        return [str(g) for g in self.allow], [str(g) for g in self.deny]


UNRESTRICTED: Final = Policy.parse(["pub", "sub", "admin"])
"""Everything, as with PETREL_AUTH=off."""


def needed_grant(action: Action, kind: ResourceKind, name: str) -> str:
    """The grant that would allow it, as a user types it: `pub:orders`, `admin`."""
    if kind == "cluster":
        return action.value
    return f"{action.value}:{kind}/{name}"
