"""Public `/v1` schemas of consuming: receive under a lease, ack, nack, visibility."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.messages.schemas import EntryError, Message
from libs.broker_api.consume import CLIENT_ID_PATTERN, MAX_HANDLES, MAX_INVISIBLE_MS, MAX_RECEIVE, MAX_WAIT_MS
from libs.filters.schema import MessageFilter

MAX_WAIT_SECONDS = MAX_WAIT_MS // 1000
MAX_INVISIBLE_SECONDS = MAX_INVISIBLE_MS // 1000
MAX_REASON_LENGTH = 1024
MAX_CLIENT_ID_LENGTH = 128


class ReceiveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_messages: int = Field(default=10, ge=1, le=MAX_RECEIVE, description="at most this many messages")
    wait_seconds: float = Field(
        default=0, ge=0, le=MAX_WAIT_SECONDS, description="hold an empty receive this long for a message to arrive"
    )
    invisible_seconds: int = Field(
        default=30,
        ge=1,
        le=MAX_INVISIBLE_SECONDS,
        description="the lease: how long the messages stay hidden from other consumers unless acked",
    )
    filter: MessageFilter | None = Field(default=None, description="only messages that match (default: every one)")
    client_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CLIENT_ID_LENGTH,
        pattern=CLIENT_ID_PATTERN,
        description="the consumer (A-Z a-z 0-9 _ . : -); a broadcast group needs it: each client gets every message",
    )


class ReceivedMessage(Message):
    receipt_handle: str = Field(description="opaque: names this lease in ack, nack and visibility")
    delivery_attempt: int = Field(description="1 on the first delivery, 2 on the first retry, ...")
    invisible_until: int = Field(description="ms since the epoch: when the lease ends unless acked or extended")


class ReceiveResult(BaseModel):
    messages: list[ReceivedMessage] = Field(description="empty when nothing came within wait_seconds")


class AckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    receipt_handles: list[str] = Field(
        min_length=1, max_length=MAX_HANDLES, description="handles of received messages, from one group"
    )


class NackRequest(BaseModel):
    """Failed attempts: each message comes back after a delay (the group's retry policy unless one is given)."""

    model_config = ConfigDict(extra="forbid")

    receipt_handles: list[str] = Field(
        min_length=1, max_length=MAX_HANDLES, description="handles of received messages, from one group"
    )
    delay_ms: int | None = Field(
        default=None,
        ge=0,
        description="redeliver after this many milliseconds (not with delay_level: 422); more than "
        "PETREL_GATEWAY_MAX_DELAY_DAYS: 400",
    )
    delay_level: int | None = Field(
        default=None,
        ge=1,
        description="redeliver after delay level N's delay (not with delay_ms: 422); past the last level: 400",
    )
    reason: str | None = Field(
        default=None, max_length=MAX_REASON_LENGTH, description="why it failed: kept with a dead letter"
    )

    @model_validator(mode="after")
    def _one_delay(self) -> Self:
        if self.delay_ms is not None and self.delay_level is not None:
            raise ValueError("give at most one of delay_ms and delay_level")
        return self


class HandleResult(BaseModel):
    receipt_handle: str = Field(description="the handle, as sent")
    ok: bool = Field(description="true when the ack or nack took effect")
    error: EntryError | None = Field(default=None, description="why not, as a problem")


class HandleResults(BaseModel):
    results: list[HandleResult] = Field(description="one per handle, in the order sent")


class VisibilityRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    receipt_handle: str = Field(min_length=1, description="the lease to extend or shorten")
    invisible_seconds: int = Field(
        ge=0, le=MAX_INVISIBLE_SECONDS, description="the lease ends this long from now (0: visible again at once)"
    )


class VisibilityResult(BaseModel):
    receipt_handle: str = Field(description="the new handle; the old one no longer acks")
    invisible_until: int = Field(description="ms since the epoch: when the new lease ends")
