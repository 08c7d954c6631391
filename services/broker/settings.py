"""Broker settings (env prefix `PETREL_BROKER_`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from libs.settings import ServiceSettings
from libs.topic import DEFAULT_QUEUES, MAX_QUEUES


class BrokerSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_BROKER_", extra="ignore")

    port: int = 10911
    cluster: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = Field(default=0, ge=0)
    advertised_address: str | None = Field(default=None, description="host:port others use; default host:port")
    register_interval_seconds: float = Field(default=30.0, gt=0)
    default_queues: int = Field(default=DEFAULT_QUEUES, ge=1, le=MAX_QUEUES)
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; default SQLite in the store dir")

    @property
    def address(self) -> str:
        return self.advertised_address or f"{self.host}:{self.port}"

    @property
    def store_dir(self) -> Path:
        return self.data_dir / "brokers" / self.broker_name

    @property
    def metadata_url(self) -> str:
        return self.database_url or f"sqlite:///{self.store_dir / 'metadata.db'}"
