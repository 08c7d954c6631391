"""Path parameters shared by the routers: declared once, with the constraints the server enforces, validated once.

A name's pattern and length go into the spec (so generated clients and fuzzers see them)
from the constants libs.names validates with. The validation stays libs.names's own: its
400s say what is wrong with the name (invalid-topic-name, reserved-topic-name) where a
schema check would answer a bare 422. Likewise a message or transaction id that is not
one of Petrel's is a 404 (nothing has that id), as it always was.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import Depends, Path

from libs.message import MESSAGE_ID_PATTERN
from libs.names import (
    DLQ_PREFIX,
    MAX_NAME_LENGTH,
    RETRY_PREFIX,
    SYSTEM_TOPICS,
    described_topic_schema,
    name_schema,
    reserved_names,
    validate_described_topic,
    validate_group_name,
    validate_readable_topic,
    validate_topic_name,
)
from libs.topic import MAX_QUEUES

_NAME_RULE: Final = f"1 to {MAX_NAME_LENGTH} characters from A-Z a-z 0-9 _ - (else 400)"


def _path(description: str, schema: dict[str, Any]) -> Any:
    # json_schema_extra: documented, not checked by FastAPI (the dependency's check answers the domain's problem).
    return Path(description=description, json_schema_extra=schema)


async def _user_topic(
    topic: Annotated[
        str,
        _path(
            f"a topic's name: {_NAME_RULE}; {reserved_names()} are reserved (400 reserved-topic-name)",
            name_schema(),
        ),
    ],
) -> str:
    return validate_topic_name(topic)


async def _any_topic(
    topic: Annotated[
        str,
        _path(
            f"a user topic's name ({_NAME_RULE}), or exactly a system topic's: {', '.join(sorted(SYSTEM_TOPICS))}, "
            f"{RETRY_PREFIX}<group>, {DLQ_PREFIX}<group> (its `%` sent as `%25`); anything else is a 400",
            described_topic_schema(),
        ),
    ],
) -> str:
    return validate_described_topic(topic)


async def _readable_topic(
    topic: Annotated[
        str,
        _path(
            f"a user topic's name: {_NAME_RULE}; a system topic is refused (400 reserved-topic-name, naming "
            "where its messages are read)",
            name_schema(),
        ),
    ],
) -> str:
    return validate_readable_topic(topic)


async def _group(
    group: Annotated[str, _path(f"a consumer group's name: {_NAME_RULE}", name_schema())],
) -> str:
    return validate_group_name(group)


async def _producer_group(
    group: Annotated[str, _path(f"a producer group's name: {_NAME_RULE}", name_schema())],
) -> str:
    return validate_group_name(group)


UserTopic = Annotated[str, Depends(_user_topic)]
"""A topic a user may create, send to and consume, as the `{topic}` path parameter."""
AnyTopic = Annotated[str, Depends(_any_topic)]
"""A user topic or one of Petrel's system topics (to describe it), as the `{topic}` path parameter."""
ReadableTopic = Annotated[str, Depends(_readable_topic)]
"""A topic whose messages the public API reads (a user topic), as the `{topic}` path parameter."""
GroupName = Annotated[str, Depends(_group)]
"""A consumer group's name, as the `{group}` path parameter."""
ProducerGroupName = Annotated[str, Depends(_producer_group)]
"""A producer group's name, as the `{group}` path parameter."""
QueueId = Annotated[int, Path(ge=0, lt=MAX_QUEUES, description="a queue of the topic on the broker")]
MessageId = Annotated[
    str,
    _path(
        "a message id: 32 hex digits (anything else is no message's: 404)",
        {"pattern": MESSAGE_ID_PATTERN, "minLength": 32, "maxLength": 32},
    ),
]
TransactionId = Annotated[
    str,
    _path(
        "a transaction id as `POST /v1/topics/{topic}/transactions` answered it: opaque, its form may change "
        "(anything else is no transaction's: 404)",
        {"minLength": 1},
    ),
]
