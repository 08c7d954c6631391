"""txcheck settings (env prefix `PETREL_TXCHECK_`)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from libs.settings import ServiceSettings


class TxcheckSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_TXCHECK_", extra="ignore")

    port: int = 10941
