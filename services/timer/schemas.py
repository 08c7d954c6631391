"""The timer service's HTTP schemas: stats and cancellations."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LevelPending(BaseModel):
    level: int
    pending: int


class Lateness(BaseModel):
    count: int = Field(description="deliveries in the sample (the last 10,000)")
    p50_ms: int
    p99_ms: int
    max_ms: int


class TimerStats(BaseModel):
    levels: list[LevelPending] = Field(description="messages waiting per delay level, over all brokers")
    wheel_pending: int = Field(description="exact-time messages in the timer wheel")
    wheel_rolled: int = Field(description="of those, how many are rolled (due beyond the wheel's window)")
    next_due_ms: int | None = Field(description="the earliest due time known, ms since the epoch")
    delivered: int
    rolled: int
    cancelled: int
    retried: int
    failed: int = Field(default=0, description="dropped after max refused deliveries (each with a delay_failed event)")
    lateness: Lateness


class Cancellation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    broker: str = Field(min_length=1)
    physical_offset: int = Field(ge=0, description="where the scheduled message is stored on that broker")
    level: int | None = Field(
        default=None, ge=1, description="the delay level it waits in; absent: an exact time (the timer wheel)"
    )


class CancellationAck(BaseModel):
    broker: str
    physical_offset: int
    cancelled: bool
