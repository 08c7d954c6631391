"""push settings (env prefix `PETREL_PUSH_`).

`database_url` (the subscriptions) is cluster-wide, also read as
`PETREL_DATABASE_URL`; `push_allowed_networks`, the endpoints' allowlist, is
cluster-only (`PETREL_PUSH_ALLOWED_NETWORKS`, libs.egress).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from libs.settings import EgressSettings, SharedDatabaseSettings


class PushSettings(SharedDatabaseSettings, EgressSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_PUSH_", extra="ignore")

    port: int = 10951
    broker_timeout_seconds: float = Field(default=5.0, gt=0, description="per call to a broker or nameserver")
    route_refresh_seconds: float = Field(default=30.0, gt=0, description="how long a topic's route is kept")
    receive_wait_seconds: float = Field(
        default=20.0, gt=0, le=30, description="how long one receive waits at the brokers for a message"
    )
    max_answer_bytes: int = Field(
        default=64 * 1024, ge=1024, description="an endpoint's answer is read up to this many bytes, the rest dropped"
    )
    attempts_kept: int = Field(default=200, ge=1, le=1000, description="recent attempts kept per subscription")
    circuit_failures: int = Field(
        default=10, ge=1, description="throttled attempts in a row (429, 5xx trouble, timeouts) that open the circuit"
    )
    circuit_open_seconds: float = Field(
        default=5.0, gt=0, description="the first wait before a probe; doubled after each failed probe"
    )
    circuit_open_max_seconds: float = Field(default=300.0, gt=0, description="the longest wait before a probe")
    max_retry_after_seconds: float = Field(
        default=3600.0, gt=0, description="a Retry-After longer than this is honoured for this long"
    )
