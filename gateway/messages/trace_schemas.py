"""Public `/v1` schemas of a message's trace (`GET /v1/messages/{message_id}/trace`)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

GroupState = Literal["waiting", "in_flight", "acked", "retrying", "dead_lettered", "redriven"]


class StoredAt(BaseModel):
    broker: str
    queue: int
    queue_offset: int


class Scheduled(BaseModel):
    due_at: datetime | None = Field(description="when it is due (null: a delay level whose time is not recorded)")
    state: Literal["pending", "delivered"]


class TracedTransaction(BaseModel):
    transaction_id: str | None
    state: Literal["open", "committed"]


class RetryCopy(BaseModel):
    topic: str
    queue: int
    queue_offset: int
    level: int = Field(description="the attempt it is for, less one (reconsume_times)")
    stored_at: datetime


class DeadLetterCopy(BaseModel):
    topic: str
    queue: int
    queue_offset: int
    stored_at: datetime
    reason: str | None


class GroupTrace(BaseModel):
    group: str
    consumer_offset: int = Field(description="the group's offset in the message's queue (the queue_offset passed)")
    state: GroupState
    attempts: int = Field(description="deliveries so far (1: the first)")
    leases_in_flight: int
    retries: list[RetryCopy]
    dead_letter: DeadLetterCopy | None


class PushTrace(BaseModel):
    group: str
    subscription: str = Field(description="the subscription's topic")
    attempts: int
    last_status: int | None
    last_error: str | None
    delivered: bool


class TraceStep(BaseModel):
    at: datetime | None = Field(description="when, where the brokers record it (an ack is not timed)")
    what: str
    group: str | None
    detail: str


class MessageTrace(BaseModel):
    message_id: str
    topic: str
    key: str | None
    tags: str | None
    born_at: datetime
    stored_at: datetime
    stored: StoredAt
    scheduled: Scheduled | None
    transaction: TracedTransaction | None
    groups: list[GroupTrace] = Field(description="every group subscribed to the topic (broadcast groups aside)")
    push: list[PushTrace]
    steps: list[TraceStep] = Field(description="oldest first, for people")
    unavailable: list[str] = Field(default_factory=list, description="brokers that did not answer")
