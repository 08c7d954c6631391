"""Push subscriptions: the bodies of the push service's internal API, which the gateway serves as they are.

A subscription is keyed by (consumer group, topic): the push service receives
the group's messages of the topic under a lease, as a consumer would, and POSTs
each to `endpoint_url`. Durations are in seconds, instants in ms since the epoch.
"""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from libs.broker_api.consume import MAX_INVISIBLE_MS
from libs.filters.schema import MessageFilter
from libs.producer_groups import HTTP_URL_SCHEMA, MAX_URL_LENGTH, SIGNING_SECRET_SCHEMA

MAX_IN_FLIGHT = 1000
MAX_RATE_PER_SECOND = 100_000.0
MAX_TIMEOUT_SECONDS = 300.0
MAX_OVERLAP_SECONDS = 7 * 86400
MAX_ATTEMPTS_SHOWN = 1000


class PayloadFormat(enum.StrEnum):
    """How a message is put in the POST (docs/push.md shows each)."""

    STANDARD_WEBHOOKS = "standard-webhooks"
    """JSON: {"type": "petrel.message", "timestamp", "data": {message fields}} (the default)"""
    CLOUDEVENTS_BINARY = "cloudevents-binary"
    """the body as it was sent; the CloudEvents attributes in ce-* headers"""
    CLOUDEVENTS_STRUCTURED = "cloudevents-structured"
    """application/cloudevents+json: the attributes and `data` (or `data_base64`) in one JSON object"""
    RAW = "raw"
    """the body as it was sent; the message's fields in petrel-* headers"""


class SubscriptionState(enum.StrEnum):
    ACTIVE = "active"
    """delivering, or waiting for messages"""
    PAUSED = "paused"
    """paused by `:pause`; `:resume` goes on"""
    BACKING_OFF = "backing_off"
    """the endpoint said 429/502/503/504 or did not answer: fewer deliveries at once, Retry-After honoured"""
    CIRCUIT_OPEN = "circuit_open"
    """the endpoint failed for a sustained time: nothing is sent but a probe now and then"""
    DISABLED = "disabled"
    """the endpoint answered 410 Gone: nothing is sent until `:resume` or a PUT"""


class SubscriptionRequest(BaseModel):
    """PUT: create or replace a subscription (a paused one stays paused; a disabled one is enabled again)."""

    model_config = ConfigDict(extra="forbid")

    endpoint_url: str = Field(
        min_length=1,
        max_length=MAX_URL_LENGTH,
        json_schema_extra=HTTP_URL_SCHEMA,
        description="http or https URL the messages are POSTed to, outside the cluster's own networks (else 400)",
    )
    filter: MessageFilter | None = Field(default=None, description="only messages that match (default: every one)")
    max_in_flight: int = Field(
        default=16, ge=1, le=MAX_IN_FLIGHT, description="deliveries waiting for an answer at once, at most"
    )
    rate_per_second: float | None = Field(
        default=None, gt=0, le=MAX_RATE_PER_SECOND, description="deliveries started per second, at most (no cap)"
    )
    timeout_seconds: float = Field(
        default=15.0, gt=0, le=MAX_TIMEOUT_SECONDS, description="how long the endpoint may take to answer"
    )
    payload_format: PayloadFormat = Field(default=PayloadFormat.STANDARD_WEBHOOKS, description="how a message is sent")
    invisible_seconds: int = Field(
        default=60,
        ge=1,
        le=MAX_INVISIBLE_MS // 1000,
        description="the lease of each delivery; an endpoint that answers 202 with `Petrel-Ack: deferred` has this "
        "long to ack or nack (or to extend it with /visibility)",
    )
    signing_secret: Annotated[str, Field(json_schema_extra=SIGNING_SECRET_SCHEMA)] | None = Field(
        default=None,
        description="whsec_ + base64 of 24 to 64 random bytes; default: generated on create, kept on update",
    )


class RotateSecretRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    overlap_seconds: int = Field(
        default=86400,
        ge=0,
        le=MAX_OVERLAP_SECONDS,
        description="the old secret signs too (a second signature) this long, while receivers change over",
    )


class PushError(BaseModel):
    at: int = Field(description="ms since the epoch")
    message_id: str
    status: int | None = Field(description="the HTTP status; null when there was no answer")
    error: str


class SubscriptionStatus(BaseModel):
    """The live part: what the push service is doing now (since it started)."""

    state: SubscriptionState
    in_flight: int = Field(description="deliveries leased and not yet settled (held ones included)")
    window: int = Field(description="deliveries allowed at once now: max_in_flight unless the endpoint is in trouble")
    deliveries_per_second: float = Field(description="attempts per second over the last minute")
    acked: int = Field(description="messages the endpoint answered 2xx (deferred ones excluded)")
    deferred: int = Field(description="messages answered 202 with Petrel-Ack: deferred")
    failed: int = Field(description="attempts that count against the message (4xx, 500, ...): nacked")
    throttled: int = Field(description="attempts that did not count: 429, 502, 503, 504, timeouts, no connection")
    retry_after_until: int | None = Field(default=None, description="ms since the epoch: a Retry-After is honoured")
    circuit_opened_at: int | None = Field(default=None, description="ms since the epoch")
    last_errors: list[PushError] = Field(description="the latest failed or throttled attempts, newest first")


class Subscription(BaseModel):
    group: str
    topic: str
    endpoint_url: str
    filter: MessageFilter | None
    max_in_flight: int
    rate_per_second: float | None
    timeout_seconds: float
    payload_format: PayloadFormat
    invisible_seconds: int
    paused: bool
    disabled_reason: str | None = Field(description="why the subscription is disabled (410 Gone), or null")
    signing_secret: str | None = Field(
        default=None, description="shown once: in the answer that created the subscription or rotated its secret"
    )
    secret_overlap_until: int | None = Field(
        default=None, description="ms since the epoch: until then the previous secret signs too"
    )
    created_at: int
    updated_at: int
    status: SubscriptionStatus


class SubscriptionList(BaseModel):
    subscriptions: list[Subscription]


class PushAttempt(BaseModel):
    at: int = Field(description="ms since the epoch, when the POST started")
    message_id: str
    delivery_attempt: int = Field(description="the group's count: 1 on the first delivery (throttled tries repeat it)")
    outcome: str = Field(description="acked, deferred, failed, throttled, gone or lost (the lease ended meanwhile)")
    status: int | None = Field(description="the HTTP status; null when there was no answer")
    latency_ms: int
    error: str | None = None


class PushAttempts(BaseModel):
    attempts: list[PushAttempt] = Field(description="newest first")
