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
