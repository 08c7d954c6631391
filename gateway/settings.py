"""Gateway settings (env prefix `PETREL_GATEWAY_`; shared: `PETREL_AUTH`, `PETREL_DATABASE_URL`,
`PETREL_DELAY_LEVELS`, `PETREL_PUSH_ALLOWED_NETWORKS`)."""

from __future__ import annotations

import ipaddress
from typing import Final, Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from gateway.cluster.long_polls import DEFAULT_MAX_LONG_POLLS
from libs.codec import MAX_BODY_SIZE
from libs.egress import is_loopback_host
from libs.http.hosts import host_name
from libs.settings import DelayLevelSettings, EgressSettings, SharedDatabaseSettings
from libs.topic import DEFAULT_QUEUES

PUBLIC_URL_SETTING: Final = "PETREL_GATEWAY_PUBLIC_URL"
ALLOWED_HOSTS_SETTING: Final = "PETREL_GATEWAY_ALLOWED_HOSTS"


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
    request_log: bool = Field(
        default=False,
        description="one JSON line per request on the gateway's log: time, method, path, status, duration_ms, "
        "request_id (x-request-id, given or made) and key_id when auth is on; never a key, query or body",
    )
    idempotency_lease_ms: int = Field(
        default=3_000,
        ge=10,
        description="the lease a send with an Idempotency-Key holds the key on, renewed every third of it while "
        "the send runs; after a gateway died, a repeat waits at most this long",
    )
    auth: Literal["required", "off"] | None = Field(
        default=None,
        description="API keys on every call (required) or none (off); default: off when the gateway listens on "
        "loopback, else required. Off on another address needs insecure_no_auth too",
    )
    public_url: str | None = Field(
        default=None,
        description="the URL clients call the gateway by when a proxy is in front of it, e.g. "
        "https://queue.example.com: the gateway answers to its host (and pages of it), and a name other hosts "
        "reach turns API keys on, as allowed_hosts does",
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

    @field_validator("public_url")
    @classmethod
    def _http_url_with_a_host(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"public_url {value!r} is not an http or https URL with a host")
        return value

    @classmethod
    def shared_fields(cls) -> frozenset[str]:
        return super().shared_fields() | {"auth"}

    def answered_names(self) -> list[str]:
        """Host names (`name` or `name:port`) the gateway answers to besides loopback ones: `allowed_hosts`, the
        public URL's host, and the address it listens on when that is a name."""
        names = [*self.allowed_hosts]
        if self.public_url is not None:
            names.append(urlsplit(self.public_url).netloc.rpartition("@")[2])
        if not _is_address(self.host):
            names.append(self.host)
        return names

    def reached_by_others(self) -> str | None:
        """How hosts other than this one reach the gateway ("on 0.0.0.0, which ..."), or None: loopback only."""
        if not is_loopback_host(self.host):
            return f"on {self.host}, which other hosts can reach"
        named = [(name, ALLOWED_HOSTS_SETTING) for name in self.allowed_hosts]
        if self.public_url is not None:
            named.append((urlsplit(self.public_url).hostname or "", PUBLIC_URL_SETTING))
        for name, setting in named:
            if not is_loopback_host(host_name(name).rstrip(".")):
                return f"with {host_name(name)!r} in {setting}, a name other hosts call it by"
        return None

    def auth_required(self) -> bool:
        """Whether calls need a key; ValueError when auth would be off where other hosts reach the gateway."""
        others = self.reached_by_others()
        mode = self.auth or ("required" if others else "off")
        if mode == "off" and others and not self.insecure_no_auth:
            raise ValueError(
                f"PETREL_AUTH=off {others}: anyone could send, consume and delete. Create keys (petrel keys "
                "create) and leave auth on, or set PETREL_GATEWAY_INSECURE_NO_AUTH=true (petrel up "
                "--insecure-no-auth) to run open anyway"
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


def _is_address(host: str) -> bool:
    """An IP address (bracketed or not), or a wildcard: not a name anyone calls the gateway by."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True
