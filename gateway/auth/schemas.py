"""Public `/v1/keys` schemas."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from libs.auth.grants import MAX_GRANTS, MAX_PATTERN_LENGTH
from libs.auth.keys import KEY_ID_PATTERN, KEY_NAME_PATTERN, ApiKey

GrantText = Annotated[
    str,
    Field(
        max_length=MAX_PATTERN_LENGTH + 16,
        pattern=r"^(pub|sub|admin|publish|subscribe)(:\S+)?$",
        description="action[:pattern]: pub:orders*, sub:group/billing, admin",
    ),
]


class KeyRequest(BaseModel):
    """A key to create: its grants (`pub:orders*`, `sub:group/billing`, `admin`; deny beats allow)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=KEY_NAME_PATTERN, description="what the key is for, e.g. billing-service")
    allow: list[GrantText] = Field(min_length=1, max_length=MAX_GRANTS, description="grants: action[:pattern]")
    deny: list[GrantText] = Field(default_factory=list, max_length=MAX_GRANTS, description="grants that beat any allow")
    rate_per_second: float | None = Field(
        default=None,
        ge=0,
        description="calls a second across the cluster, at most the maker's; null: the maker's (its own, or the "
        "gateway's default); 0: unlimited",
    )


class KeyInfo(BaseModel):
    key_id: str = Field(pattern=KEY_ID_PATTERN, description="public: names the key in listings and audit events")
    name: str
    allow: list[str]
    deny: list[str]
    rate_per_second: float | None
    created_at: int = Field(description="ms since the epoch")
    created_by: str
    revoked_at: int | None = Field(description="ms since the epoch; null while the key is valid")

    @classmethod
    def of(cls, key: ApiKey) -> KeyInfo:
        return cls.model_validate(key.public_fields())


class CreatedKey(KeyInfo):
    key: str = Field(description="the key to send as 'Authorization: Bearer <key>': shown this once, never again")


class KeyList(BaseModel):
    keys: list[KeyInfo]
