"""Public `/v1` schemas of messages: sending, pulling, querying."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from typing_extensions import TypeAliasType

from libs.message import KEY_PATTERN

MAX_BATCH = 256
MAX_PROPERTIES = 64
MAX_PROPERTY_NAME = 128
MAX_PROPERTY_VALUE = 16_384
MAX_KEYS = 64
MAX_KEY_LENGTH = 128
"""Limits of a message sent, in characters; the encoded properties (keys, tag and Petrel's own included)
are at most 32 KiB (libs.codec.MAX_PROPERTIES_BYTES, RocketMQ's limit too): 400 invalid-message past it."""

# Named, so that the spec has one `Properties` schema and a generated client one class for it,
# not one per model that has a `properties` field.
Properties = TypeAliasType(
    "Properties", Annotated[dict[str, str], Field(description="a message's user properties: text names and values")]
)
PropertiesToSend = TypeAliasType(
    "PropertiesToSend",
    Annotated[
        dict[
            Annotated[str, StringConstraints(min_length=1, max_length=MAX_PROPERTY_NAME)],
            Annotated[str, StringConstraints(max_length=MAX_PROPERTY_VALUE)],
        ],
        Field(
            max_length=MAX_PROPERTIES,
            description=f"a message's user properties: at most {MAX_PROPERTIES}, names of 1 to {MAX_PROPERTY_NAME} "
            f"characters, values of at most {MAX_PROPERTY_VALUE}, 32 KiB in all (with keys and tag)",
        ),
    ],
)
Key = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_KEY_LENGTH), Field(json_schema_extra={"pattern": KEY_PATTERN})
]


class MessageContent(BaseModel):
    """What a message holds, as sent: the fields a transactional send shares with a plain one."""

    model_config = ConfigDict(extra="forbid")

    body: str | None = Field(
        default=None, description="the body as text (UTF-8; at most max_message_bytes encoded, 4 MiB by default)"
    )
    body_base64: str | None = Field(
        default=None, description="the body as base64, for bytes (at most max_message_bytes decoded)"
    )
    tag: str | None = Field(
        default=None,
        max_length=255,
        description="one tag, for TAG filters: not '*', no '||', no surrounding spaces (else 400 invalid-message)",
    )
    keys: list[Key] = Field(
        default_factory=list,
        max_length=MAX_KEYS,
        description=f"keys to find the message by: at most {MAX_KEYS}, of 1 to {MAX_KEY_LENGTH} characters, no spaces",
    )
    properties: PropertiesToSend = Field(
        default_factory=dict,
        description="user properties, for SQL92 filters; Petrel's own property names are reserved "
        "(400 invalid-message)",
    )
    message_group: str | None = Field(
        default=None, min_length=1, max_length=255, description="messages of one group go to one queue, in order"
    )


class SendMessage(MessageContent):
    """One message to send: exactly one of `body` (text) or `body_base64` (bytes)."""

    delay_level: int | None = Field(
        default=None,
        json_schema_extra={"minimum": 1},
        description="deliver after level N's delay (1: 1 s ... 18: 2 h); past the last level "
        "(PETREL_DELAY_LEVELS): 400 invalid-message",
    )
    delay_ms: int | None = Field(
        default=None,
        ge=0,
        description="deliver after this many milliseconds; more than PETREL_GATEWAY_MAX_DELAY_DAYS: 400",
    )
    deliver_at: str | int | None = Field(
        default=None, description="deliver at this time: RFC 3339 or epoch ms (at most one of the three delays)"
    )


class SendResult(BaseModel):
    message_id: str
    topic: str
    broker: str
    queue_id: int
    queue_offset: int | None = Field(description="null for a scheduled message until it is delivered")
    stored_at: int = Field(description="ms since the epoch")
    deliver_at: int | None = Field(default=None, description="for a scheduled message: when it will be delivered")
    warning: str | None = Field(default=None, description="something the sender should know, e.g. a past deliver_at")


class SendBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[SendMessage] = Field(min_length=1, max_length=MAX_BATCH)


class EntryError(BaseModel):
    """Why one entry of a batch (a message sent, a receipt handle acked) failed, as a problem."""

    type: str
    title: str
    status: int
    detail: str
    maybe_stored: bool | None = Field(
        default=None,
        description="true: the message may be stored all the same (flush-timeout, a not-master or "
        "replication-timeout after the append, or no answer); send it again only with the same Idempotency-Key",
    )
    stored: SendResult | None = Field(
        default=None,
        description="flush-timeout, and not-master or replication-timeout after the append: where the message is "
        "(or may be) stored; do not send it again without the same Idempotency-Key",
    )


class BatchEntry(BaseModel):
    index: int
    result: SendResult | None = None
    error: EntryError | None = None


class BatchResult(BaseModel):
    results: list[BatchEntry] = Field(description="one per message, in the order sent")


class Message(BaseModel):
    message_id: str
    topic: str
    body: str | None = None
    body_base64: str | None = None
    tag: str | None = None
    keys: list[str]
    properties: Properties
    message_group: str | None = None
    born_at: int = Field(description="ms since the epoch, when the gateway accepted it")
    stored_at: int = Field(description="ms since the epoch, when the broker stored it")
    broker: str
    queue_id: int
    queue_offset: int
    reconsume_times: int = 0


class PullResult(BaseModel):
    messages: list[Message]
    next_offset: int = Field(description="where the next pull starts")
    min_offset: int
    max_offset: int
    broker: str


class QueueOffsets(BaseModel):
    topic: str
    queue_id: int
    broker: str
    min_offset: int = Field(description="the oldest offset still stored (above 0 once retention trimmed the queue)")
    max_offset: int = Field(description="the offset the next message stored gets")
    offset_for_timestamp: int | None = Field(
        default=None, description="with ?timestamp: the first offset stored at or after it (max_offset when none is)"
    )


class MessageList(BaseModel):
    messages: list[Message]
    truncated: bool = Field(
        default=False,
        description="a broker read as many key-index entries as it may (PETREL_BROKER_KEY_QUERY_MAX_ENTRIES): "
        "more messages with the key may be stored; narrow begin and end to find them",
    )
