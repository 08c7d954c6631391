"""txcheck settings (env prefix `PETREL_TXCHECK_`), shared by its health process, Celery workers and beat.

`redis_url` (the Celery broker, locks and the scan's notes) and `database_url`
(the producer groups) are cluster-wide, also read as `PETREL_REDIS_URL` and
`PETREL_DATABASE_URL`; `push_allowed_networks`, the check-back URLs' allowlist,
is cluster-only (`PETREL_PUSH_ALLOWED_NETWORKS`, libs.egress). `transaction_check_max` is enforced by the broker;
txcheck passes nothing for it.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from libs.settings import EgressSettings, SharedDatabaseSettings


class TxcheckSettings(SharedDatabaseSettings, EgressSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_TXCHECK_", extra="ignore")

    port: int = 10941
    scan_interval_seconds: float = Field(default=30.0, gt=0, description="how often beat starts a scan")
    transaction_timeout_ms: int = Field(
        default=6000, ge=0, description="a half message not ended this long after it was stored is checked back"
    )
    transaction_check_max: int = Field(default=15, ge=1, description="documentation only: the broker enforces it")
    checkback_timeout_seconds: float = Field(default=5.0, gt=0, description="how long a producer may take to answer")
    broker_timeout_seconds: float = Field(default=5.0, gt=0, description="per call to a broker or nameserver")
    check_time_limit_seconds: int = Field(default=30, ge=5, description="a check task is killed past this")
    check_retries: int = Field(default=5, ge=0, description="retries of a check whose broker did not answer")
    check_retry_backoff_max_seconds: int = Field(
        default=30, ge=1, description="the longest wait between retries of a check"
    )
    scan_time_limit_seconds: int = Field(default=120, ge=1, description="a scan stops and resumes next time")
    scan_batch: int = Field(default=256, ge=1, le=1024, description="half or op records read per pull")
    scan_parallelism: int = Field(default=16, ge=1, description="half copies renewed at once during a scan")
    check_batch: int = Field(
        default=16, ge=1, le=64, description="half copies of one broker checked by one task, side by side"
    )
    max_check_backlog: int = Field(
        default=1000, ge=1, description="check tasks waiting in Redis past which a scan stops until the next one"
    )
    ended_ttl_seconds: int = Field(
        default=3 * 86400, gt=0, description="how long the ended message ids of a broker no longer scanned are kept"
    )
    visibility_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        description="a task taken by a worker that died is given to another worker after this",
    )
    worker_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="check tasks run at once by one worker (its prefork processes); unset: min(2, the machine's cores)",
    )
    redis_key_prefix: str = Field(
        default="petrel:txcheck:", description="prefix of every Redis key txcheck and its Celery queues use"
    )

    @property
    def concurrency(self) -> int:
        """The worker's prefork processes: `worker_concurrency`, else one per core up to two (each is ~60 MB)."""
        return self.worker_concurrency or min(2, os.cpu_count() or 1)

    @property
    def state_dir(self) -> Path:
        """Beat's schedule file and the worker's and beat's pid files."""
        return self.data_dir / "txcheck"

    @property
    def transaction_timeout_s(self) -> float:
        return self.transaction_timeout_ms / 1000
