"""Public `/v1` schemas of consumer groups: configuration, lag, offsets, dead letters.

A group's configuration is defined once, in `libs.broker_api.groups` (its fields,
bounds, defaults and their documentation); `GroupUpdate` and `Group` derive from it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.consume.schemas import MAX_CLIENT_ID_LENGTH
from gateway.messages.schemas import Message
from libs.broker_api import groups as contract
from libs.broker_api.consume import CLIENT_ID_PATTERN
from libs.filters import FilterType


class GroupUpdate(contract.GroupUpdate):
    """What `PUT /v1/groups/{group}` sets; every field is optional (its default applies)."""


class Subscription(BaseModel):
    topic: str = Field(description="a topic the group has received from")
    filter_type: FilterType = Field(description="the kind of filter of its last receive")
    expression: str = Field(description="the filter expression; * for every message")


class Group(contract.GroupConfig):
    """A consumer group's configuration and what it subscribes to."""

    model_config = ConfigDict(extra="ignore")
    """A broker's answer validates straight into it (its `created` is left out)."""

    subscriptions: list[Subscription] = Field(default_factory=list, description="the topics it consumes, as filtered")


class GroupList(BaseModel):
    groups: list[Group] = Field(description="every group the brokers hold, by name")
    unavailable: list[str] = Field(
        default_factory=list, description="brokers that did not answer: groups only they hold are missing"
    )


class QueueLag(BaseModel):
    broker: str = Field(description="the broker holding the queue")
    topic: str = Field(description="the queue's topic (the group's retry topic for retries)")
    queue_id: int = Field(description="the queue on that broker")
    broker_offset: int = Field(description="the queue's next offset: one past its last message")
    consumer_offset: int = Field(description="the group's offset: the lowest one not yet acked")
    lag: int = Field(description="messages not yet acked: broker_offset - consumer_offset")
    in_flight: int = Field(description="messages leased and not yet acked")
    retry: bool = Field(description="true for the group's retry queue")
    client_id: str | None = Field(default=None, description="broadcast groups: whose offsets these are")


class GroupLag(BaseModel):
    group: str = Field(description="the group's name")
    queues: list[QueueLag] = Field(description="per broker, topic and queue")
    total_lag: int = Field(description="the sum of the queues' lag")
    total_in_flight: int = Field(description="the sum of the queues' in_flight")
    unavailable: list[str] = Field(
        default_factory=list, description="brokers that did not answer: their queues are missing"
    )


class LagPoint(BaseModel):
    at: datetime = Field(description="when the brokers sampled it (UTC), at the start of its interval")
    lag: int = Field(description="the group's lag on the topic then, over every broker")


class LagSeries(BaseModel):
    topic: str
    samples: list[LagPoint] = Field(description="oldest first")


class LagHistory(BaseModel):
    group: str = Field(description="the group's name")
    interval_seconds: float = Field(description="how often the brokers sample (PETREL_BROKER_LAG_SAMPLE_SECONDS)")
    retention_seconds: float = Field(description="how far back they keep samples (PETREL_BROKER_LAG_HISTORY_SECONDS)")
    series: list[LagSeries] = Field(description="per subscribed topic (its retry topic too, once it exists)")
    unavailable: list[str] = Field(
        default_factory=list, description="brokers that did not answer: their queues are missing"
    )


class OffsetResetRequest(BaseModel):
    """Move the group's offsets in every queue of the topic: to a time, or to an offset (exactly one; else 422)."""

    model_config = ConfigDict(extra="forbid")

    timestamp: int | str | None = Field(
        default=None, description="the first message stored at or after this time: RFC 3339 or epoch ms"
    )
    offset: int | None = Field(default=None, ge=0, description="this queue offset (clamped to each queue's range)")
    client_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CLIENT_ID_LENGTH,
        pattern=CLIENT_ID_PATTERN,
        description="broadcast groups: whose offsets",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.timestamp is None) == (self.offset is None):
            raise ValueError("give exactly one of timestamp and offset")
        return self


class ResetQueueOffset(BaseModel):
    broker: str = Field(description="the broker holding the queue")
    queue_id: int = Field(description="the queue on that broker")
    offset: int = Field(description="the group's offset there now")


class OffsetReset(BaseModel):
    group: str = Field(description="the group's name")
    topic: str = Field(description="the topic whose offsets moved")
    queues: list[ResetQueueOffset] = Field(description="the new offset of each queue")


class DeadLetter(Message):
    original_topic: str = Field(description="the topic the message was sent to")
    attempts: int = Field(description="deliveries made before it was dead-lettered")
    reason: str | None = Field(default=None, description="why: attempts, and the consumer's last nack reason")
    dead_lettered_at: int = Field(description="ms since the epoch, when it reached the DLQ")


class DeadLetterQueue(BaseModel):
    broker: str = Field(description="the broker holding this part of the DLQ")
    next_offset: int = Field(description="where the next peek at this broker starts")
    min_offset: int = Field(description="the DLQ's first offset")
    max_offset: int = Field(description="one past the DLQ's last offset")


class DeadLetterList(BaseModel):
    messages: list[DeadLetter] = Field(description="oldest first, per broker")
    queues: list[DeadLetterQueue] = Field(description="each broker's DLQ offsets, for paging")
    unavailable: list[str] = Field(
        default_factory=list, description="brokers that did not answer: their dead letters are missing"
    )


class RedriveRequest(BaseModel):
    """Send dead letters back to the group (its retry topic), with their message ids kept."""

    model_config = ConfigDict(extra="forbid")

    message_ids: list[str] | None = Field(
        default=None, min_length=1, max_length=1000, description="these dead letters only (default: all)"
    )
    max_messages: int = Field(default=1000, ge=1, le=100_000, description="at most this many")
    per_second: int = Field(default=100, ge=1, le=10_000, description="at most this many per second")


class RedriveResult(BaseModel):
    redriven: int = Field(description="how many went back")
    message_ids: list[str] = Field(description="their ids")
    not_found: list[str] = Field(
        default_factory=list, description="ids of message_ids that no broker asked holds in its DLQ"
    )
    remaining: int = Field(
        description="dead letters still in the DLQ (of the brokers reached before max_messages was spent)"
    )
    unavailable: list[str] = Field(
        default_factory=list, description="brokers that did not answer: their dead letters stay"
    )
