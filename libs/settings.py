"""The base of every service's settings class (pydantic-settings, env prefix `PETREL_`).

Each service subclasses `ServiceSettings` with its own prefix, e.g.
`PETREL_BROKER_PORT`. The fields of `ServiceSettings` itself are shared by the
whole cluster, so they may also be given once without the service's name
(`PETREL_DATA_DIR`, `PETREL_INTERNAL_TOKEN_FILE`, `PETREL_NAMESERVERS`, ...); the
service-specific spelling wins when both are set.

`SharedDatabaseSettings` is the base of the services that use the cluster's
shared metadata database (the gateway writes producer groups, txcheck reads
them): its `database_url` is cluster-wide too (`PETREL_DATABASE_URL`). It is not
in `ServiceSettings` because a broker's own `database_url` (topics, consumer
offsets) must never follow it: brokers sharing those tables would mix them up.

`DelayLevelSettings` is the base of the services that use the delay-level table
(the gateway, the broker, the timer): `PETREL_DELAY_LEVELS`, one value for the
whole cluster. It is cluster-only: a service-specific spelling
(`PETREL_BROKER_DELAY_LEVELS`) is refused at start, as services that disagree on
the table would schedule one level at two different times.

`EgressSettings` is the base of the services that call users' URLs (the gateway
checks check-back URLs when they are registered, txcheck before each call):
`PETREL_PUSH_ALLOWED_NETWORKS`, cluster-only too (libs.egress).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Any, cast

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from libs.cluster_token import read_token_file, too_short
from libs.delay import DEFAULT_DELAY_LEVELS, DelayLevelTable
from libs.egress import EgressGuard, Resolver, default_allowed, parse_networks, system_resolver

AddressList = Annotated[list[str], NoDecode]
"""Entries (host:port, CIDRs); from the environment as a comma- or semicolon-separated string (split_entries)."""


def split_entries(value: Any) -> Any:
    """An AddressList from the environment's string; a list passes as it is."""
    if isinstance(value, str):
        return [part.strip() for part in value.replace(";", ",").split(",") if part.strip()]
    return value


class ServiceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_", extra="ignore")

    host: str = Field(default="127.0.0.1", description="the address the service listens on")
    port: int = Field(default=0, description="the port the service listens on")
    data_dir: Path = Field(default=Path("data"), description="stores, logs, events and run state go under it")
    internal_token: SecretStr | None = Field(
        default=None,
        description="a secret every internal call carries (x-petrel-internal-token), at least 32 bytes; set, calls "
        "without it are refused; internal_token_file is the better way to give it",
    )
    internal_token_file: Path | None = Field(
        default=None,
        description="a file (mode 0600) holding the cluster token, read at start; wins over internal_token; "
        "`petrel up` writes <data_dir>/cluster.token and gives its path to every service",
    )
    allowed_hosts: AddressList = Field(
        default=[],
        json_schema_extra={"env_type": "host names, comma-separated"},
        description="host names an internal service answers to in the Host header, besides IP addresses, "
        "localhost, the nameservers' names and its own (a DNS-rebinding page uses a name of its own), "
        "e.g. 'timer.petrel.internal'; the gateway's (PETREL_GATEWAY_ALLOWED_HOSTS): names it answers to, and "
        "one other hosts reach turns API keys on (with auth off it answers to loopback names only)",
    )
    nameservers: AddressList = Field(default=["127.0.0.1:9876"], description="every nameserver's host:port")
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="the gateway's Idempotency-Key records; txcheck's and the nightly ETL's Celery queues and locks",
    )
    log_level: str = Field(default="info", description="debug, info, warning or error")
    max_json_depth: int = Field(
        default=32,
        ge=1,
        le=128,
        description="how deep a JSON request body may nest (arrays and objects); deeper: 400 malformed-body",
    )
    max_json_items: int = Field(
        default=65_536,
        ge=1,
        description="array items and object members a JSON request body may hold, counted before it is parsed; "
        "more: 413",
    )
    events_enabled: bool = Field(
        default=True, description="write lifecycle events under <data_dir>/export/events (the ETL's input)"
    )
    max_header_bytes: int = Field(
        default=32 * 1024,
        ge=1024,
        description="the longest request line plus headers a connection may send; past it: 431 and the "
        "connection is closed",
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="how long a connection has to send a request's headers, from connecting or from the "
        "request's first bytes; past it the connection is closed (with a 408 if a request had begun)",
    )
    body_timeout_seconds: float = Field(
        default=20.0,
        gt=0,
        description="how long a request's body may take from the end of its headers, plus 1/body_min_rate s for "
        "each byte of it that has come (mod_reqtimeout's body=20,MinRate=500); past it, a body that stalled or "
        "trickled slower is answered 408 and its connection closed",
    )
    body_min_rate: int = Field(
        default=500,
        ge=1,
        description="bytes a second: each byte of a request body that comes gives it 1/body_min_rate s more than "
        "body_timeout_seconds; a body slower than this is cut off however long it keeps coming",
    )
    max_connections: int = Field(
        default=10_000,
        ge=1,
        description="open connections per service process; past it a new connection is closed at once "
        "(keep it well above the gateway's max_long_polls: each waiting receive holds one)",
    )
    hot_path: bool = Field(
        default=True,
        description="serve the hot routes (sends, receives, acks; a broker's puts) without FastAPI's request "
        "cycle: the same handlers and checks, less work per request; false: every route through FastAPI",
    )
    otel_enabled: bool = Field(
        default=False,
        description="FastAPI's native OpenTelemetry hooks: off unless asked for (Petrel exports Prometheus "
        "metrics itself)",
    )

    @field_validator("nameservers", "allowed_hosts", mode="before")
    @classmethod
    def _split_addresses(cls, value: Any) -> Any:
        return split_entries(value)

    @field_validator("internal_token")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and value.get_secret_value() and (short := too_short(value.get_secret_value())):
            raise ValueError(short)
        return value

    @field_validator("internal_token_file", mode="before")
    @classmethod
    def _no_empty_path(cls, value: Any) -> Any:
        return None if value == "" else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        shared = _SharedEnvSource(settings_cls, env_prefix="PETREL_")
        if settings_cls.model_config.get("env_prefix") != "PETREL_":
            env_settings = _ServiceEnvSource(settings_cls)
        return init_settings, env_settings, shared, dotenv_settings, file_secret_settings

    @classmethod
    def shared_fields(cls) -> frozenset[str]:
        """The cluster-wide fields: also read with the bare `PETREL_` prefix."""
        return frozenset(ServiceSettings.model_fields) - {"host", "port"}

    @classmethod
    def cluster_only_fields(cls) -> frozenset[str]:
        """The shared fields a service may not set for itself: read only with the bare `PETREL_` prefix."""
        return frozenset()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def host_names(self) -> list[str]:
        """Names (host or host:port) an internal service answers to in the Host header, besides IP addresses and
        localhost: `allowed_hosts`, the nameservers' names (every service calls them by those) and its own `host`."""
        return [*self.allowed_hosts, *self.nameservers, self.host]

    def cluster_token(self) -> str | None:
        """The token internal calls carry: `internal_token_file`'s content, else `internal_token`, else None.

        Reads the file at each call (a service calls it once, at start); ClusterTokenError when the file is
        missing, unreadable, empty or open to its group or others.
        """
        if self.internal_token_file is not None:
            return read_token_file(self.internal_token_file)
        if self.internal_token is not None and self.internal_token.get_secret_value():
            return self.internal_token.get_secret_value()
        return None


class SharedDatabaseSettings(ServiceSettings):
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the shared metadata database, e.g. postgresql+psycopg://user@host/petrel; "
        "default: SQLite <data_dir>/metadata.db",
    )

    @classmethod
    def shared_fields(cls) -> frozenset[str]:
        return super().shared_fields() | {"database_url"}

    @property
    def metadata_url(self) -> str:
        """The shared metadata database's URL: `database_url`, or the SQLite file in the data dir."""
        return self.database_url or f"sqlite:///{self.data_dir / 'metadata.db'}"


class DelayLevelSettings(ServiceSettings):
    delay_levels: DelayLevelTable = Field(
        default=DEFAULT_DELAY_LEVELS,
        validate_default=True,
        json_schema_extra={"env_type": "durations, space-separated"},
        description="the delay-level table, level 1 first, e.g. '1s 5s 10s 30s 1m'; one value for the cluster",
    )

    @classmethod
    def shared_fields(cls) -> frozenset[str]:
        return super().shared_fields() | {"delay_levels"}

    @classmethod
    def cluster_only_fields(cls) -> frozenset[str]:
        return super().cluster_only_fields() | {"delay_levels"}


class EgressSettings(ServiceSettings):
    push_allowed_networks: AddressList | None = Field(
        default=None,
        json_schema_extra={"env_type": "CIDRs, comma-separated"},
        description="networks a user's URL (check-back, push) may resolve into although not public by IANA's "
        "special-purpose registries (loopback, private, shared, link-local, metadata...), e.g. "
        "'10.20.0.0/16,fd12::/64'; default: loopback when the service listens on loopback, else none "
        "(libs.egress); one value for the cluster",
    )

    @field_validator("push_allowed_networks", mode="before")
    @classmethod
    def _split_networks(cls, value: Any) -> Any:
        return split_entries(value)

    @field_validator("push_allowed_networks")
    @classmethod
    def _parse_networks(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            parse_networks(value)
        return value

    @classmethod
    def shared_fields(cls) -> frozenset[str]:
        return super().shared_fields() | {"push_allowed_networks"}

    @classmethod
    def cluster_only_fields(cls) -> frozenset[str]:
        return super().cluster_only_fields() | {"push_allowed_networks"}

    def egress_guard(self, resolve: Resolver = system_resolver) -> EgressGuard:
        """The guard over user URLs: the allowlist as set, or the default for this service's `host`."""
        if self.push_allowed_networks is None:
            return EgressGuard(default_allowed(self.host), resolve)
        return EgressGuard(parse_networks(self.push_allowed_networks), resolve)


class _ServiceEnvSource(EnvSettingsSource):
    """The service's own spellings (`PETREL_BROKER_...`); refuses a cluster-only field spelled so."""

    def __call__(self) -> dict[str, Any]:
        values = super().__call__()
        refused = sorted(cast(type[ServiceSettings], self.settings_cls).cluster_only_fields() & values.keys())
        if refused:
            spelled = ", ".join(f"{self.env_prefix}{name}".upper() for name in refused)
            bare = ", ".join(f"PETREL_{name}".upper() for name in refused)
            raise SettingsError(f"{spelled} is not read: the setting is cluster-wide, set {bare} instead")
        return values


class _SharedEnvSource(EnvSettingsSource):
    """Reads only the cluster-wide fields, with the bare `PETREL_` prefix."""

    def __call__(self) -> dict[str, Any]:
        shared = cast(type[ServiceSettings], self.settings_cls).shared_fields()
        return {name: value for name, value in super().__call__().items() if name in shared}


def cluster_key_prefix(service: str, data_dir: Path) -> str:
    """`petrel:<service>:<hash of the data directory>:`: a service's Redis keys and Celery queues, apart from
    those of other clusters sharing the Redis; a cluster restarted on the same data finds them again."""
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:10]
    return f"petrel:{service}:{digest}:"
