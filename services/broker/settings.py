"""Broker settings (env prefix `PETREL_BROKER_`; the delay-level table: `PETREL_DELAY_LEVELS`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from libs.settings import DelayLevelSettings
from libs.store.config import FlushMode, StoreConfig
from libs.topic import DEFAULT_QUEUES, MAX_QUEUES


class BrokerSettings(DelayLevelSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_BROKER_", extra="ignore")

    port: int = 10911
    cluster: str = "DefaultCluster"
    broker_name: str = "broker-a"
    broker_id: int = Field(default=0, ge=0)
    advertised_address: str | None = Field(default=None, description="host:port others use; default host:port")
    register_interval_seconds: float = Field(default=30.0, gt=0)
    default_queues: int = Field(default=DEFAULT_QUEUES, ge=1, le=MAX_QUEUES)
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; default SQLite in the store dir")
    flush_mode: FlushMode = FlushMode.ASYNC_FLUSH
    flush_interval_ms: int = Field(default=500, ge=10)
    sync_flush_timeout_ms: int = Field(default=5_000, ge=10)
    checkpoint_interval_ms: int = Field(default=5_000, ge=10)
    segment_size: int = Field(default=1024 * 1024 * 1024, ge=64 * 1024 * 1024 // 1024)
    cq_units_per_file: int = Field(default=300_000, ge=16)
    index_slot_count: int = Field(default=5_000_000, ge=16)
    index_max_entries: int = Field(default=20_000_000, ge=16)
    file_reserved_hours: float = Field(default=72.0, gt=0)
    delete_when_hour: int = Field(
        default=4, ge=-1, le=23, description="the local hour expired segments are deleted in; -1: any hour"
    )
    disk_max_used_ratio: float = Field(default=0.75, gt=0, le=1)
    disk_refuse_ratio: float = Field(default=0.95, gt=0, le=1)
    retention_scan_seconds: float = Field(
        default=10.0, gt=0, description="how often retention looks for what to delete"
    )
    scheduled_roll_grace_seconds: float = Field(
        default=60.0, ge=0, description="under disk pressure, how long pending scheduled messages get to be rolled"
    )
    offset_persist_interval_seconds: float = Field(default=5.0, gt=0)
    max_pull_wait_ms: int = Field(default=30_000, ge=0)
    broadcast_client_idle_seconds: float = Field(
        default=7 * 86_400.0, gt=0, description="a broadcast client not seen this long has its offsets dropped"
    )
    ended_transactions_kept: int = Field(
        default=100_000, ge=1, description="ended transactions remembered in memory; older ones read from disk"
    )
    transaction_check_max: int = Field(default=15, ge=1, description="check-backs before a half message is abandoned")
    lease_scan_ms: int = Field(default=100, ge=1, description="how often leases that ran out are ended")

    @property
    def address(self) -> str:
        return self.advertised_address or f"{self.host}:{self.port}"

    @property
    def store_dir(self) -> Path:
        return self.data_dir / "brokers" / self.broker_name

    def store_config(self) -> StoreConfig:
        return StoreConfig(
            root=self.store_dir,
            segment_size=self.segment_size,
            flush_mode=self.flush_mode,
            flush_interval_ms=self.flush_interval_ms,
            sync_flush_timeout_ms=self.sync_flush_timeout_ms,
            checkpoint_interval_ms=self.checkpoint_interval_ms,
            cq_units_per_file=self.cq_units_per_file,
            index_slot_count=self.index_slot_count,
            index_max_entries=self.index_max_entries,
            file_reserved_hours=self.file_reserved_hours,
            delete_when_hour=self.delete_when_hour,
            disk_max_used_ratio=self.disk_max_used_ratio,
            disk_refuse_ratio=self.disk_refuse_ratio,
            scheduled_roll_grace_seconds=self.scheduled_roll_grace_seconds,
        )

    @property
    def metadata_url(self) -> str:
        return self.database_url or f"sqlite:///{self.store_dir / 'metadata.db'}"
