"""Names: what a topic or group may be called, and the system topics' names."""

from __future__ import annotations

import re
from typing import Any, Final

from libs.errors import InvalidRequest, InvalidTopicName, ReservedTopicName

MAX_NAME_LENGTH: Final = 127
MAX_SYSTEM_NAME_LENGTH: Final = 255
NAME_PATTERN: Final = f"^[A-Za-z0-9_-]{{1,{MAX_NAME_LENGTH}}}$"
"""A user topic's or a group's name; one regular expression for Python and for JSON Schema (the spec)."""
SYSTEM_NAME_PATTERN: Final = f"^[%|A-Za-z0-9_-]{{1,{MAX_SYSTEM_NAME_LENGTH}}}$"
"""Any topic's name, a system topic's (%RETRY%group, %DLQ%group) included: what services take from each other.

The public edge takes less: a user topic's name (NAME_PATTERN), and, where a topic is only
described, exactly one of Petrel's system topics (validate_described_topic)."""
_USER_NAME = re.compile(NAME_PATTERN)
_SYSTEM_NAME = re.compile(SYSTEM_NAME_PATTERN)

SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC: Final = "rmq_sys_wheel_timer"
TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"

SYSTEM_TOPICS: Final = frozenset(
    {SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC}
)
TRANSACTION_TOPICS: Final = frozenset({TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC})
SCHEDULE_TOPICS: Final = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC})
_RESERVED_PREFIXES: Final = (RETRY_PREFIX, DLQ_PREFIX, "rmq_sys_", "RMQ_SYS_")


def name_schema() -> dict[str, Any]:
    """The JSON Schema of a user topic's or a group's name, for the spec of a field or parameter that takes one."""
    return {"pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME_LENGTH}


def described_topic_schema() -> dict[str, Any]:
    """The JSON Schema of a name that may be a user topic's or exactly one of Petrel's system topics'."""
    group = NAME_PATTERN.strip("^$")
    exact = "|".join(re.escape(name) for name in sorted(SYSTEM_TOPICS))
    pattern = f"^({group}|{re.escape(RETRY_PREFIX)}{group}|{re.escape(DLQ_PREFIX)}{group}|{exact})$"
    return {"pattern": pattern, "minLength": 1, "maxLength": len(RETRY_PREFIX) + MAX_NAME_LENGTH}


def reserved_names() -> str:
    """The user topic names that are reserved, in words (for the spec's descriptions)."""
    names = ", ".join(sorted(SYSTEM_TOPICS))
    prefixes = ", ".join(_RESERVED_PREFIXES)
    return f"the system topics' names ({names}) and names starting with {prefixes}"


def is_system_topic(name: str) -> bool:
    return name in SYSTEM_TOPICS or name.startswith(_RESERVED_PREFIXES)


def validate_topic_name(name: str, *, allow_system: bool = False) -> str:
    """The name, if a user (or, with allow_system, a service) may use it; else a clear 400."""
    if allow_system and _SYSTEM_NAME.fullmatch(name):
        return name
    if not _USER_NAME.fullmatch(name):
        raise InvalidTopicName(
            f"topic name {name!r} is invalid: use 1 to {MAX_NAME_LENGTH} characters from A-Z a-z 0-9 _ -"
        )
    if is_system_topic(name):
        raise ReservedTopicName(f"topic name {name!r} is reserved for Petrel's system topics")
    return name


def validate_group_name(name: str) -> str:
    """The consumer group's name, if valid (the characters of a user topic name); else a clear 400.

    A group's name becomes part of its system topics (%RETRY%group, %DLQ%group).
    """
    if not _USER_NAME.fullmatch(name):
        raise InvalidRequest(
            f"group name {name!r} is invalid: use 1 to {MAX_NAME_LENGTH} characters from A-Z a-z 0-9 _ -"
        )
    return name


def is_public_topic(name: str) -> bool:
    """May the public pull, key query and get-by-id show this topic's messages? Only a user topic's.

    Each system topic has its own reader, and no other: a half message is seen by no one
    until it is committed (/v1/transactions), a scheduled one until it is due, a group's
    retries only by its receives, its dead letters only through /v1/groups/{group}/dlq.
    """
    return not is_system_topic(name)


def private_reader(name: str) -> str:
    """What a system topic holds and where it is read, for the answer refusing to read it."""
    if name in TRANSACTION_TOPICS:
        return "transactions' half messages and records: read them through /v1/transactions"
    if name in SCHEDULE_TOPICS:
        return "scheduled messages: each is visible in its own topic once it is due, not before"
    if name.startswith(DLQ_PREFIX):
        return f"dead letters: read them through GET /v1/groups/{name.removeprefix(DLQ_PREFIX)}/dlq"
    if name.startswith(RETRY_PREFIX):
        return f"retries: group {name.removeprefix(RETRY_PREFIX)!r} receives them with the messages of its topics"
    return "Petrel's own records"


def validate_readable_topic(name: str) -> str:
    """A topic whose messages the public API may read (a user topic); else a clear 400 (naming a system topic's reader).

    The name is the one the public edge decoded, once: a `%` left in it is no user topic's
    (400 invalid-topic-name), whatever it would decode to again.
    """
    if is_petrels_system_topic(name):
        raise ReservedTopicName(f"topic {name!r} holds {private_reader(name)}")
    return validate_topic_name(name)


def validate_described_topic(name: str) -> str:
    """A user topic's name, or exactly a system topic's (one of SYSTEM_TOPICS, %RETRY%<group>, %DLQ%<group>).

    What the public API lets a caller name to describe a topic (never to read its messages);
    anything else is a clear 400 (invalid-topic-name, or reserved-topic-name for a reserved
    name that is no system topic of Petrel's).
    """
    return name if is_petrels_system_topic(name) else validate_topic_name(name)


def is_petrels_system_topic(name: str) -> bool:
    """One of Petrel's system topics, exactly (not merely a reserved name)."""
    return name in SYSTEM_TOPICS or system_topic_group(name) is not None


def system_topic_group(name: str) -> str | None:
    """The group whose retry or DLQ topic this is (a valid group name after the prefix); else None."""
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        group = name.removeprefix(prefix)
        if group != name and _USER_NAME.fullmatch(group):
            return group
    return None


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group
