"""The JSON bodies of a broker's consume API: receive, ready, ack, nack, visibility, lag, offsets, dead letters."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from libs.filters import FilterType

MAX_RECEIVE = 32
MAX_WAIT_MS = 30_000
MAX_INVISIBLE_MS = 12 * 3_600_000
MAX_HANDLES = 256
CLIENT_ID_PATTERN = r"^[A-Za-z0-9_.:-]+$"


class ReceiveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_messages: int = Field(default=10, ge=1, le=MAX_RECEIVE)
    invisible_ms: int = Field(default=30_000, ge=1, le=MAX_INVISIBLE_MS)
    wait_ms: int = Field(default=0, ge=0, le=MAX_WAIT_MS)
    filter_type: FilterType | None = None
    expression: str | None = Field(default=None, max_length=4096)
    client_id: str | None = Field(default=None, min_length=1, max_length=128, pattern=CLIENT_ID_PATTERN)


class ReadyAnswer(BaseModel):
    ready: bool


class HandleList(BaseModel):
    model_config = ConfigDict(extra="forbid")

    receipt_handles: list[str] = Field(min_length=1, max_length=MAX_HANDLES)


class NackBody(HandleList):
    delay_ms: int | None = Field(default=None, ge=0, le=30 * 86_400_000)
    delay_level: int | None = Field(default=None, ge=1)
    reason: str | None = Field(default=None, max_length=1024)


class HandleError(BaseModel):
    type: str
    title: str
    status: int
    detail: str


class HandleResult(BaseModel):
    receipt_handle: str
    ok: bool
    error: HandleError | None = None


class HandleResults(BaseModel):
    results: list[HandleResult]


class VisibilityBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    receipt_handle: str
    invisible_ms: int = Field(ge=0, le=MAX_INVISIBLE_MS)


class VisibilityAnswer(BaseModel):
    receipt_handle: str
    invisible_until: int


class QueueLagModel(BaseModel):
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    lag: int
    in_flight: int
    retry: bool
    client_id: str | None = None


class LagAnswer(BaseModel):
    queues: list[QueueLagModel]


class LagSampleModel(BaseModel):
    at_ms: int
    topics: dict[str, int]
    """topic -> the group's lag on the answering broker's queues of it"""


class LagHistoryAnswer(BaseModel):
    interval_seconds: float
    history_seconds: float
    samples: list[LagSampleModel]


class OffsetResetBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timestamp: int | None = Field(default=None, ge=0)
    offset: int | None = Field(default=None, ge=0)
    client_id: str | None = None


class QueueOffsetAnswer(BaseModel):
    queue_id: int
    offset: int


class OffsetResetAnswer(BaseModel):
    queues: list[QueueOffsetAnswer]


class RedriveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message_ids: list[str] | None = Field(default=None, max_length=10_000)
    max_messages: int = Field(default=1_000, ge=1, le=100_000)
    per_second: int = Field(default=100, ge=1, le=100_000)


class RedriveAnswer(BaseModel):
    redriven: list[str]
    not_found: list[str]
    remaining: int
