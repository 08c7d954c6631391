"""A broker's answer for the cluster's overview (GET /internal/overview): its disk, rates, topics and groups."""

from __future__ import annotations

from pydantic import BaseModel, Field


class DiskModel(BaseModel):
    used_bytes: int
    free_bytes: int
    total_bytes: int
    store_bytes: int = Field(description="the CommitLog's bytes still held (from its oldest segment to its end)")


class TopicActivity(BaseModel):
    topic: str
    send_rate: float
    messages: int = Field(description="messages held in its queues here (retention aside)")


class GroupBehind(BaseModel):
    group: str
    topics: dict[str, int] = Field(description="topic -> lag here, at the last sample")


class BrokerOverview(BaseModel):
    disk: DiskModel
    send_rate: float = Field(description="messages stored a second, between the last two lag samples")
    receive_rate: float = Field(description="messages consumed (acked or handed on) a second, likewise")
    topics: list[TopicActivity]
    groups: list[GroupBehind]
