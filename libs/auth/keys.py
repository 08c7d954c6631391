"""API keys: created, listed and revoked in the shared metadata database; only their hashes are kept.

A key reads `ptk_<key id>_<secret>`. The key id (12 hex characters) is public: it
names the key in listings, logs and audit events. The secret is 32 random bytes
(urlsafe base64) and is shown once, when the key is created. The database keeps
the SHA-256 of the secret: a secret of 256 random bits cannot be guessed from its
hash, so the slow password hashes (bcrypt, argon2), made for secrets people
choose, would only add milliseconds to every call.

Every row has a `changed_at` (ms), set when it is created or revoked, so that a
gateway can fetch what changed since it last looked (`changed_since`) and a
revocation reaches every gateway within its refresh interval.

Calls are synchronous (SQLAlchemy): an async caller runs them in a worker thread.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from typing import Final

from sqlalchemy import JSON, BigInteger, Engine, Float, MetaData, String, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from libs.auth.grants import Policy
from libs.errors import InvalidRequest, NotFound
from libs.metadata_db import open_engine

KEY_PREFIX: Final = "ptk_"
KEY_ID_PATTERN: Final = r"^[0-9a-f]{12}$"
KEY_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_KEY = re.compile(r"^ptk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")


class Base(DeclarativeBase):
    metadata = MetaData()


class ApiKeyRow(Base):
    __tablename__ = "api_keys"

    key_id: Mapped[str] = mapped_column(String(12), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    secret_hash: Mapped[str] = mapped_column(String(64))
    allow: Mapped[list[str]] = mapped_column(JSON)
    deny: Mapped[list[str]] = mapped_column(JSON)
    rate_per_second: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[int] = mapped_column(BigInteger)
    created_by: Mapped[str] = mapped_column(String(160))
    revoked_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    changed_at: Mapped[int] = mapped_column(BigInteger, index=True)


class KeyNotFound(NotFound):
    slug = "key-not-found"
    title = "API key not found"


@dataclass(frozen=True, slots=True)
class ApiKey:
    key_id: str
    name: str
    allow: tuple[str, ...]
    deny: tuple[str, ...]
    rate_per_second: float | None
    """None: the gateway's default rate (PETREL_GATEWAY_KEY_RATE_PER_SECOND); 0: unlimited"""
    created_at: int
    created_by: str
    revoked_at: int | None
    changed_at: int
    secret_hash: str

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def policy(self) -> Policy:
        return Policy.parse(self.allow, self.deny)

    def public_fields(self) -> dict[str, object]:
        """What a listing shows of the key (the API's KeyInfo, `petrel keys list --json`): never its hash."""
        return {
            "key_id": self.key_id,
            "name": self.name,
            "allow": list(self.allow),
            "deny": list(self.deny),
            "rate_per_second": self.rate_per_second,
            "created_at": self.created_at,
            "created_by": self.created_by,
            "revoked_at": self.revoked_at,
        }

    def verifies(self, secret: str) -> bool:
        return hmac.compare_digest(_hash(secret), self.secret_hash)


@dataclass(frozen=True, slots=True)
class Credential:
    """A bearer key split into its public id and its secret (nothing checked yet but its shape)."""

    key_id: str
    secret: str

    @classmethod
    def parse(cls, text: str) -> Credential | None:
        match = _KEY.match(text)
        return cls(match[1], match[2]) if match else None


def open_key_engine(url: str) -> Engine:
    """An engine for the shared metadata database at `url`, with the api_keys table created."""
    return open_engine(url, Base.metadata)


class KeyStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(
        self,
        name: str,
        allow: list[str],
        deny: list[str] | None = None,
        *,
        rate_per_second: float | None = None,
        created_by: str = "cli",
    ) -> tuple[ApiKey, str]:
        """A new key and its full text (`ptk_...`), which is not kept: show it once."""
        if not re.match(KEY_NAME_PATTERN, name):
            raise InvalidRequest(f"key name {name!r} must match {KEY_NAME_PATTERN}")
        if not allow:
            raise InvalidRequest("a key needs at least one allow grant, e.g. pub:orders*")
        if rate_per_second is not None and rate_per_second < 0:
            raise InvalidRequest("rate_per_second must be 0 (unlimited) or more")
        deny = deny or []
        policy = Policy.parse(allow, deny)  # refuses a malformed grant before anything is written
        allow_text, deny_text = policy.grants_text()
        key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        now = _now_ms()
        row = ApiKeyRow(
            key_id=key_id,
            name=name,
            secret_hash=_hash(secret),
            allow=allow_text,
            deny=deny_text,
            rate_per_second=rate_per_second,
            created_at=now,
            created_by=created_by,
            revoked_at=None,
            changed_at=now,
        )
        with Session(self.engine) as session, session.begin():
            session.add(row)
            key = _key(row)
        return key, f"{KEY_PREFIX}{key_id}_{secret}"

    def get(self, key_id: str) -> ApiKey:
        with Session(self.engine) as session:
            row = session.get(ApiKeyRow, key_id)
            if row is None:
                raise KeyNotFound(f"no API key has the id {key_id!r}")
            return _key(row)

    def list_keys(self) -> list[ApiKey]:
        with Session(self.engine) as session:
            return [_key(row) for row in session.scalars(select(ApiKeyRow).order_by(ApiKeyRow.created_at))]

    def revoke(self, key_id: str) -> ApiKey:
        """Revoked at once in the database (a second revoke keeps the first time); gateways follow within seconds."""
        with Session(self.engine) as session, session.begin():
            row = session.get(ApiKeyRow, key_id, with_for_update=True)
            if row is None:
                raise KeyNotFound(f"no API key has the id {key_id!r}")
            if row.revoked_at is None:
                now = _now_ms()
                row.revoked_at = now
                row.changed_at = now
            return _key(row)

    def changed_since(self, since_ms: int) -> list[ApiKey]:
        """Keys created or revoked at or after `since_ms` (at or after: two changes in one ms are both seen)."""
        with Session(self.engine) as session:
            rows = session.scalars(select(ApiKeyRow).where(ApiKeyRow.changed_at >= since_ms))
            return [_key(row) for row in rows]


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _key(row: ApiKeyRow) -> ApiKey:
    return ApiKey(
        key_id=row.key_id,
        name=row.name,
        allow=tuple(row.allow),
        deny=tuple(row.deny),
        rate_per_second=row.rate_per_second,
        created_at=row.created_at,
        created_by=row.created_by,
        revoked_at=row.revoked_at,
        changed_at=row.changed_at,
        secret_hash=row.secret_hash,
    )
