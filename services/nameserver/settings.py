"""Nameserver settings (env prefix `PETREL_NAMESERVER_`)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from libs.settings import ServiceSettings


class NameserverSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_NAMESERVER_", extra="ignore")

    port: int = 9876
    scan_interval_seconds: float = Field(default=5.0, gt=0, description="how often brokers gone silent are looked for")
    broker_expiry_seconds: float = Field(
        default=120.0, gt=0, description="a broker not heard from this long is dropped from the routes"
    )
    controller: bool = Field(
        default=False,
        description="run the replication controller here: each broker name's master, epoch and in-sync set, and "
        "automatic failover (run it on one nameserver)",
    )
    controller_master_timeout_seconds: float = Field(
        default=3.0,
        gt=0,
        description="a master that has not reported this long is replaced by its most caught-up in-sync slave; "
        "keep it above the brokers' controller_lease_ms",
    )
    controller_scan_ms: int = Field(default=200, ge=10, description="how often the controller looks for silent masters")
