"""Names: what a topic or group may be called, and the system topics' names."""

from __future__ import annotations

import re
from typing import Final

from libs.errors import InvalidRequest, InvalidTopicName, ReservedTopicName

MAX_NAME_LENGTH: Final = 127
_USER_NAME = re.compile(r"[A-Za-z0-9_-]{1,127}")
_SYSTEM_NAME = re.compile(r"[%|A-Za-z0-9_-]{1,255}")

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
"""Never read through the public API: a half message is seen by no one until it is committed."""
_RESERVED_PREFIXES: Final = (RETRY_PREFIX, DLQ_PREFIX, "rmq_sys_", "RMQ_SYS_")


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


def validate_readable_topic(name: str) -> str:
    """A topic the public API may read: user topics and system ones, but not the transaction topics."""
    validate_topic_name(name, allow_system=True)
    if name in TRANSACTION_TOPICS:
        raise ReservedTopicName(
            f"topic {name!r} holds transactions' half messages and records: read them through /v1/transactions"
        )
    return name


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group
