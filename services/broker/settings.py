"""Broker settings (env prefix `PETREL_BROKER_`; the delay-level table: `PETREL_DELAY_LEVELS`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from libs.broker_api.replication import BrokerRole
from libs.filters import MAX_EXPRESSION_LENGTH, FilterLimits
from libs.settings import DelayLevelSettings
from libs.store.budget import ScanBudget
from libs.store.config import FlushMode, StoreConfig
from libs.store.queue_scan import MAX_UNITS_SCANNED
from libs.topic import DEFAULT_QUEUES, MAX_QUEUES


class BrokerSettings(DelayLevelSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_BROKER_", extra="ignore")

    port: int = 10911
    cluster: str = Field(default="DefaultCluster", description="the cluster the broker registers in")
    broker_name: str = Field(
        default="broker-a", description="unique in the cluster; the store is <data_dir>/brokers/<broker_name>"
    )
    broker_id: int = Field(default=0, ge=0, description="0: the master of its broker name; a slave's is 1 or more")
    role: BrokerRole = Field(
        default=BrokerRole.ASYNC_MASTER,
        description="ASYNC_MASTER takes writes, its slaves copy its CommitLog behind it; SLAVE copies its master's "
        "(the same broker name) and answers reads only; SYNC_MASTER answers a write once its in-sync slaves have it",
    )
    master_address: str | None = Field(default=None, description="a SLAVE's master: host:port")
    sync_replication_timeout_ms: int = Field(
        default=3_000,
        ge=10,
        description="SYNC_MASTER: an in-sync slave that has not confirmed a put by then leaves the in-sync set",
    )
    replica_lag_max_ms: int = Field(
        default=15_000,
        ge=10,
        description="a slave that has not caught up with its master's log (had its end as of some moment) for this "
        "long leaves the in-sync set (which a controller promotes from), under ASYNC_MASTER too: the most an "
        "ASYNC_MASTER's failover may lose, short of a silent slave (Kafka's replica.lag.time.max.ms, RocketMQ's "
        "haMaxTimeSlaveNotCatchup)",
    )
    controlled: bool = Field(
        default=False,
        description="under the replication controller: the controller (in the nameservers, on etcd: PETREL_ETCD_*) "
        "decides which broker of this broker name is master (role then says SYNC_MASTER or ASYNC_MASTER for when it "
        "is) and promotes a slave on failure; the broker reports itself in etcd on a lease of its own",
    )
    controller_heartbeat_ms: int = Field(
        default=500, ge=10, description="how often a controlled broker writes its report in etcd (when it changed)"
    )
    master_lease_seconds: int = Field(
        default=2,
        ge=2,
        description="the TTL of a controlled broker's etcd lease (its report and, as master, its master key): a "
        "master stops acknowledging writes before etcd can have expired it, and the controller promotes a slave "
        "only once etcd has; failover takes about this plus one election",
    )
    master_lease_margin_ms: int = Field(
        default=500,
        ge=0,
        description="a master counts its lease as ending this much before its TTL runs out from the last keep-alive "
        "it sent (clock rates, scheduling)",
    )
    advertised_address: str | None = Field(default=None, description="host:port others use; default host:port")
    register_interval_seconds: float = Field(default=30.0, gt=0, description="the heartbeat to every nameserver")
    nameserver_timeout_seconds: float = Field(
        default=3.0,
        gt=0,
        description="a call to a nameserver (a registration page, a topic change, a heartbeat) unanswered by then "
        "fails and is made again at the next heartbeat",
    )
    default_queues: int = Field(
        default=DEFAULT_QUEUES, ge=1, le=MAX_QUEUES, description="queues of a topic created without a count"
    )
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; default SQLite in the store dir")
    flush_mode: FlushMode = Field(
        default=FlushMode.ASYNC_FLUSH,
        description="ASYNC_FLUSH answers a send from the page cache; SYNC_FLUSH once it is on disk",
    )
    flush_interval_ms: int = Field(default=500, ge=10, description="ASYNC_FLUSH: how often the CommitLog is synced")
    sync_flush_timeout_ms: int = Field(
        default=5_000, ge=10, description="SYNC_FLUSH: a send not on disk by then is answered 503 flush-timeout"
    )
    checkpoint_interval_ms: int = Field(
        default=5_000, ge=10, description="how often the checkpoint (where recovery starts) is written"
    )
    segment_size: int = Field(
        default=1024 * 1024 * 1024, ge=64 * 1024 * 1024 // 1024, description="bytes of one CommitLog segment file"
    )
    cq_units_per_file: int = Field(default=300_000, ge=16, description="20-byte ConsumeQueue units per file")
    index_slot_count: int = Field(default=5_000_000, ge=16, description="hash slots of one IndexFile")
    index_max_entries: int = Field(default=20_000_000, ge=16, description="keys and ids one IndexFile holds")
    file_reserved_hours: float = Field(
        default=72.0, gt=0, description="retention: CommitLog segments older than this are deleted"
    )
    delete_when_hour: int = Field(
        default=4, ge=-1, le=23, description="the local hour expired segments are deleted in; -1: any hour"
    )
    disk_max_used_ratio: float = Field(
        default=0.75, gt=0, le=1, description="past this disk use, the oldest segments are deleted early"
    )
    disk_refuse_ratio: float = Field(
        default=0.95, gt=0, le=1, description="past this disk use, sends are refused (507)"
    )
    lag_sample_seconds: float = Field(
        default=10.0,
        gt=0,
        description="how often each consumer group's lag is sampled for its history (the console's chart)",
    )
    lag_history_seconds: float = Field(
        default=3600.0, gt=0, description="how much lag history each group keeps in memory (longer is Prometheus's)"
    )
    retention_scan_seconds: float = Field(
        default=10.0, gt=0, description="how often retention looks for what to delete"
    )
    scheduled_roll_grace_seconds: float = Field(
        default=60.0, ge=0, description="under disk pressure, how long pending scheduled messages get to be rolled"
    )
    offset_persist_interval_seconds: float = Field(
        default=5.0, gt=0, description="how often consumer offsets are written to the database"
    )
    max_pull_wait_ms: int = Field(default=30_000, ge=0, description="the longest a pull's wait_ms may hold")
    broadcast_client_idle_seconds: float = Field(
        default=7 * 86_400.0, gt=0, description="a broadcast client not seen this long has its offsets dropped"
    )
    ended_transactions_kept: int = Field(
        default=100_000, ge=1, description="ended transactions remembered in memory; older ones read from disk"
    )
    transaction_check_max: int = Field(default=15, ge=1, description="check-backs before a half message is abandoned")
    lease_scan_ms: int = Field(default=100, ge=1, description="how often leases that ran out are ended")
    filter_max_expression_length: int = Field(
        default=MAX_EXPRESSION_LENGTH, ge=1, description="characters of a TAG or SQL92 filter expression (400 past it)"
    )
    filter_max_nesting: int = Field(
        default=100, ge=1, description="how deep an SQL92 filter's parentheses, AND, OR and NOT may nest (400 past it)"
    )
    filter_max_conditions: int = Field(
        default=256, ge=1, description="conditions an SQL92 filter joins with AND and OR (400 past it)"
    )
    filter_max_in_list: int = Field(default=256, ge=1, description="strings in one SQL92 IN list (400 past it)")
    filter_scan_max_units: int = Field(
        default=MAX_UNITS_SCANNED,
        ge=1,
        description="ConsumeQueue units one pull or receive reads looking for what its filter wants; past it a pull "
        "answers what it found with the next offset to go on from, a receive what it leased (perhaps nothing)",
    )
    key_query_max_entries: int = Field(
        default=100_000,
        ge=1,
        description="IndexFile entries a query by key reads; past it the query answers what it found, marked truncated",
    )
    scan_slice_ms: float = Field(
        default=5.0,
        gt=0,
        description="a filter scan or a key query lets the event loop serve other requests after this much work",
    )

    @model_validator(mode="after")
    def _role_fits_id(self) -> BrokerSettings:
        if self.controlled:
            if self.master_lease_margin_ms >= self.master_lease_seconds * 1000:
                raise ValueError("master_lease_margin_ms leaves nothing of master_lease_seconds")
            if self.role is BrokerRole.SLAVE:
                raise ValueError(
                    "under a controller, role says how to replicate as master: SYNC_MASTER or ASYNC_MASTER"
                )
            return self
        if self.role is BrokerRole.SLAVE and (self.broker_id == 0 or not self.master_address):
            raise ValueError("a SLAVE broker needs a broker_id of 1 or more and its master_address")
        if self.role is not BrokerRole.SLAVE and self.broker_id != 0:
            raise ValueError(f"broker_id {self.broker_id} is a slave's: set role SLAVE and master_address")
        return self

    def filter_limits(self) -> FilterLimits:
        return FilterLimits(
            self.filter_max_expression_length,
            self.filter_max_nesting,
            self.filter_max_conditions,
            self.filter_max_in_list,
        )

    def filter_scan_budget(self) -> ScanBudget:
        return ScanBudget(self.filter_scan_max_units, self.scan_slice_ms / 1000)

    def key_query_budget(self) -> ScanBudget:
        return ScanBudget(self.key_query_max_entries, self.scan_slice_ms / 1000)

    @property
    def address(self) -> str:
        return self.advertised_address or f"{self.host}:{self.port}"

    def host_names(self) -> list[str]:
        """Also the name in its advertised address: the one others call it by."""
        return [*super().host_names(), self.address]

    @property
    def store_dir(self) -> Path:
        """<data_dir>/brokers/<broker_name> for a master, <broker_name>@<broker_id> for a slave."""
        name = self.broker_name if self.broker_id == 0 else f"{self.broker_name}@{self.broker_id}"
        return self.data_dir / "brokers" / name

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
