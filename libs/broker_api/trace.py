"""The broker's answer to a message's trace (GET /internal/messages/by-id/{id}/trace): its copies here, and where
each group stands at each copy a group reads (services.broker.trace). The gateway composes `/v1`'s trace from them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class CopyModel(BaseModel):
    """A record with the message's id: the original, or a scheduled, half, retry or dead-letter copy."""

    topic: str
    queue_id: int
    queue_offset: int
    stored_at: int
    born_at: int
    reconsume_times: int
    properties: dict[str, str]


class GroupPositionModel(BaseModel):
    """Where a group stands at one copy it reads: done (acked, or handed on to a retry copy), leased, or not yet."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    consumer_offset: int
    position: Literal["done", "in_flight", "waiting"]
    attempt: int
    """the lease's attempt (1 the first delivery) when in flight, else 0"""
    lease_expires_at: int | None = None


class TraceAnswer(BaseModel):
    copies: list[CopyModel]
    positions: list[GroupPositionModel]
