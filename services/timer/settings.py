"""Timer settings (env prefix `PETREL_TIMER_`; the delay-level table: `PETREL_DELAY_LEVELS`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from libs.settings import DelayLevelSettings

DAY_MS = 86_400_000


class TimerSettings(DelayLevelSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_TIMER_", extra="ignore")

    port: int = 10931
    scan_interval_ms: int = Field(default=100, ge=10, description="how often due messages are looked for")
    precision_ms: int = Field(default=100, description="the timer wheel's slot: 100, 200, 500 or 1000")
    window_days: float = Field(default=7.0, gt=0, description="time the wheel covers; later timers are rolled")
    max_delay_days: float = Field(default=30.0, gt=0, description="how far ahead a message may be scheduled")
    checkpoint_interval_ms: int = Field(default=1000, ge=10, description="how often the timer's progress is saved")
    broker_refresh_seconds: float = Field(
        default=5.0, gt=0, description="how often the brokers are listed from the nameservers"
    )
    timer_log_segment_bytes: int = Field(
        default=72 * 1024 * 1024,
        ge=56 * 1024,
        description="bytes of one TimerLog segment file (rounded down to whole 72-byte records)",
    )
    delivery_max_attempts: int = Field(
        default=8, ge=1, le=255, description="refused deliveries of a message before it is dropped (delay_failed)"
    )
    retention_check_ms: int = Field(
        default=10_000, ge=10, description="how often brokers hear what the timer needs, and old messages are rolled"
    )

    @property
    def store_dir(self) -> Path:
        return self.data_dir / "timer"

    @property
    def window_ms(self) -> int:
        return int(self.window_days * DAY_MS)

    @property
    def max_delay_ms(self) -> int:
        return int(self.max_delay_days * DAY_MS)
