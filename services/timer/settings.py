"""Timer settings (env prefix `PETREL_TIMER_`)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from libs.settings import ServiceSettings


class TimerSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_TIMER_", extra="ignore")

    port: int = 10931
