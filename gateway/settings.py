"""Gateway settings (env prefix `PETREL_GATEWAY_`; shared: `PETREL_DATABASE_URL`, `PETREL_DELAY_LEVELS`,
`PETREL_PUSH_ALLOWED_NETWORKS`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from gateway.cluster.long_polls import DEFAULT_MAX_LONG_POLLS
from libs.codec import MAX_BODY_SIZE
from libs.settings import DelayLevelSettings, EgressSettings, SharedDatabaseSettings
from libs.topic import DEFAULT_QUEUES


class GatewaySettings(SharedDatabaseSettings, DelayLevelSettings, EgressSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_GATEWAY_", extra="ignore")

    port: int = 8080
    cluster: str = Field(default="DefaultCluster", description="where new topics are created")
    route_refresh_seconds: float = Field(
        default=30.0,
        gt=0,
        description="how long a topic's route is cached (refetched at once when a broker contradicts it)",
    )
    default_queues: int = Field(
        default=DEFAULT_QUEUES, ge=1, description="queues per broker of a topic created without a count"
    )
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024, description="the largest request body accepted")
    max_message_bytes: int = Field(
        default=MAX_BODY_SIZE,
        ge=1,
        le=MAX_BODY_SIZE,
        description="the largest message body sent (bytes, as stored); larger: 413 (RocketMQ's maxMessageSize)",
    )
    auto_create_topics: bool = Field(default=True, description="a send to a topic that does not exist creates it")
    broker_timeout_seconds: float = Field(default=5.0, gt=0, description="per call to a broker or nameserver")
    max_long_polls: int = Field(
        default=DEFAULT_MAX_LONG_POLLS, ge=1, description="receives and pulls waiting at once; past it: 429"
    )
    timer_address: str = Field(default="127.0.0.1:10931", description="the timer service, for stats and cancels")
    push_address: str = Field(default="127.0.0.1:10951", description="the push service: push subscriptions")
    max_delay_days: float = Field(default=30.0, gt=0, description="how far ahead a send may be scheduled")
    idempotency_lease_ms: int = Field(
        default=15_000,
        ge=10,
        description="how long a send with an Idempotency-Key holds the key; after a gateway died, a repeat "
        "waits this long",
    )
