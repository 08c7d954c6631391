"""The public `/v1` schemas (every body is a named model; the spec is generated from these)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from libs.topic import MAX_QUEUES, MessageType


class TopicSpec(BaseModel):
    """What `PUT /v1/topics/{topic}` may set; every field is optional: absent, it keeps its value (on create, its
    default)."""

    model_config = ConfigDict(extra="forbid")

    queues: int | None = Field(
        default=None,
        ge=1,
        le=MAX_QUEUES,
        description="queues on each broker (default 8); fewer is refused (409) while a queue to be removed holds "
        "messages within retention",
    )
    message_type: MessageType | None = Field(
        default=None, description="what kind of messages the topic takes (default NORMAL)"
    )


class TopicQueue(BaseModel):
    queue_id: int
    readable: bool
    writable: bool
    min_offset: int | None = Field(
        default=None,
        description="the queue's oldest offset still stored (retention removes older ones); in getTopic's answer "
        "to a key that may subscribe to or administer the topic, else absent",
    )
    max_offset: int | None = Field(default=None, description="the offset the queue's next message gets; as min_offset")


class TopicOnBroker(BaseModel):
    broker: str
    available: bool = Field(description="false when the broker did not answer; its queues are then unknown")
    queues: list[TopicQueue]


class Topic(BaseModel):
    topic: str
    message_type: MessageType
    queues: int = Field(description="queues across all brokers")
    brokers: list[TopicOnBroker]


class TopicSummary(BaseModel):
    topic: str
    message_type: MessageType
    queues: int = Field(description="writable queues across all brokers")
    brokers: list[str]


class TopicList(BaseModel):
    topics: list[TopicSummary]
