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
        description="run a replication controller here: it campaigns in etcd (PETREL_ETCD_ENDPOINTS, required) for "
        "the controller's lead, and the leader decides each broker name's master, epoch and in-sync set and fails "
        "over; run it on every nameserver, one leads at a time",
    )
    controller_master_timeout_seconds: float = Field(
        default=3.0,
        gt=0,
        description="a broker name with no state yet whose replicas hold data waits this long (from when the leading "
        "controller first saw it) before its most caught-up live replica is made master, so that a replica "
        "restarting a little later is not truncated to a shorter one; a new, empty broker name begins at once",
    )
    controller_scan_ms: int = Field(
        default=200, ge=10, description="how often the leading controller reads etcd again besides its watch"
    )
