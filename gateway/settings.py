"""Gateway settings (env prefix `PETREL_GATEWAY_`; shared: `PETREL_AUTH`, `PETREL_DATABASE_URL`,
`PETREL_DELAY_LEVELS`, `PETREL_PUSH_ALLOWED_NETWORKS`)."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from gateway.cluster.long_polls import DEFAULT_MAX_LONG_POLLS
from libs.codec import MAX_BODY_SIZE
from libs.egress import is_loopback_host
from libs.settings import DelayLevelSettings, EgressSettings, SharedDatabaseSettings
from libs.topic import DEFAULT_QUEUES


class GatewaySettings(SharedDatabaseSettings, DelayLevelSettings, EgressSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_GATEWAY_", extra="ignore")

    port: int = 8080
    reuse_port: bool = Field(
        default=False,
        description="listen with SO_REUSEPORT (Linux), so that several gateway processes share the port and the "
        "kernel spreads connections among them (petrel up --gateway-workers N sets it)",
    )
    worker: str = Field(
        default="gateway",
        description="this process's name among the gateway processes sharing a port (petrel up: gateway, "
        "gateway-2, ...); /healthz answers it, so a probe can tell which process answered",
    )
    cluster: str = Field(default="DefaultCluster", description="where new topics are created")
    route_refresh_seconds: float = Field(
        default=3.0,
        gt=0,
        description="how long a topic's route is cached (refetched at once when a broker fails or contradicts it); "
        "after a failover, sends reach the new master within this even while the old one is silent, not refusing",
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
    auth: Literal["required", "off"] | None = Field(
        default=None,
        description="API keys on every call (required) or none (off); default: off when the gateway listens on "
        "loopback, else required. Off on another address needs insecure_no_auth too",
    )
    insecure_no_auth: bool = Field(
        default=False,
        description="let auth be off on an address other hosts reach: anyone who reaches the gateway can do anything",
    )
    key_refresh_seconds: float = Field(
        default=2.0, gt=0, description="how often the gateway reads keys created or revoked elsewhere"
    )
    key_rate_per_second: float = Field(
        default=5000.0,
        ge=0,
        description="calls a second per API key, across the cluster, for a key created without its own rate; 0: "
        "unlimited",
    )
    audit_refusals_per_second: float = Field(
        default=100.0, gt=0, description="at most this many audit events of refused calls (401, 403, 429) a second"
    )

    @classmethod
    def shared_fields(cls) -> frozenset[str]:
        return super().shared_fields() | {"auth"}

    def auth_required(self) -> bool:
        """Whether calls need a key; ValueError when auth would be off on an address other hosts reach."""
        loopback = is_loopback_host(self.host)
        mode = self.auth or ("off" if loopback else "required")
        if mode == "off" and not loopback and not self.insecure_no_auth:
            raise ValueError(
                f"PETREL_AUTH=off on {self.host}, which other hosts can reach: anyone could send, consume and "
                "delete. Create keys (petrel keys create) and leave auth on, or set "
                "PETREL_GATEWAY_INSECURE_NO_AUTH=true (petrel up --insecure-no-auth) to run open anyway"
            )
        return mode == "required"

    @model_validator(mode="after")
    def _long_polls_within_connections(self) -> Self:
        if self.max_long_polls >= self.max_connections:
            raise ValueError(
                f"max_long_polls ({self.max_long_polls}) must be below max_connections ({self.max_connections}): "
                "each waiting receive holds a connection, and the others need some too"
            )
        return self
