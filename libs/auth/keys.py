"""API keys: created, listed and revoked in the shared metadata database; only their hashes are kept.

A key reads `ptk_<key id>_<secret>`. The key id (12 hex characters) is public: it
names the key in listings, logs and audit events. The secret is 32 random bytes
(urlsafe base64) and is shown once, when the key is created. The database keeps
the SHA-256 of the secret: a secret of 256 random bits cannot be guessed from its
hash, so the slow password hashes (bcrypt, argon2), made for secrets people
choose, would only add milliseconds to every call.

Every change of a row (created, revoked) takes the next change number
(libs.auth.key_tables), so that a gateway can fetch what changed after the last
number it saw (`changed_after`) and a revocation reaches every gateway within its
refresh interval, whatever the clocks of the hosts say.

A key is made with another key (`create_by`, for `POST /v1/keys`) or without one
(`create`, for `petrel keys create`, the root of trust): made with one, it is never
wider than its maker (libs.auth.delegation), which must still be valid when the row
is written.

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

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from libs.auth.delegation import delegate
from libs.auth.grants import Policy
from libs.auth.key_tables import ApiKeyRow, Base, claim_changes, migrate
from libs.errors import InvalidRequest, NotFound, Unauthorized
from libs.metadata_db import open_engine

KEY_PREFIX: Final = "ptk_"
KEY_ID_PATTERN: Final = r"^[0-9a-f]{12}$"
KEY_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_KEY = re.compile(r"^ptk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")


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
    """ms, by the clock of the host that wrote it: for people, never for ordering"""
    change_seq: int | None
    """the number of the row's last change (libs.auth.key_tables); None in a row no newer Petrel has opened"""
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
    """An engine for the shared metadata database at `url`, with the key tables created or brought up to date."""
    engine = open_engine(url, Base.metadata)
    migrate(engine)
    return engine


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
        """A new key, with the grants as given, and its full text (`ptk_...`), which is not kept: show it once."""
        row, text = _new_row(name, allow, deny or [], rate_per_second, created_by)
        with Session(self.engine) as session, session.begin():
            row.change_seq = claim_changes(session)
            session.add(row)
            return _key(row), text

    def create_by(
        self,
        maker_id: str,
        name: str,
        allow: list[str],
        deny: list[str],
        *,
        rate_per_second: float | None,
        default_rate: float,
    ) -> tuple[ApiKey, str]:
        """A new key made with the key `maker_id`: no wider than it (Forbidden otherwise), its denies added.

        The maker is read in the transaction that writes the new key: one revoked a moment ago,
        on any gateway, makes nothing (Unauthorized). `default_rate`: the rate of a key without its own.
        """
        Policy.parse(allow, deny)  # a malformed grant is a 400 before anything is looked up
        with Session(self.engine) as session, session.begin():
            change = claim_changes(session)
            maker = session.get(ApiKeyRow, maker_id)
            if maker is None or maker.revoked_at is not None:
                raise Unauthorized(f"the API key {maker_id} was revoked", key_id=maker_id)
            made = delegate(
                Policy.parse(maker.allow, maker.deny),
                maker.rate_per_second,
                default_rate,
                f"{maker.name!r} ({maker_id})",
                allow,
                deny,
                rate_per_second,
            )
            row, text = _new_row(name, made.allow, made.deny, made.rate_per_second, f"key {maker_id}")
            row.change_seq = change
            session.add(row)
            return _key(row), text

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
            change = claim_changes(session)
            row = session.get(ApiKeyRow, key_id, with_for_update=True)
            if row is None:
                raise KeyNotFound(f"no API key has the id {key_id!r}")
            if row.revoked_at is None:
                now = _now_ms()
                row.revoked_at = now
                row.changed_at = now
                row.change_seq = change
            return _key(row)

    def changed_after(self, change_seq: int) -> list[ApiKey]:
        """Keys whose last change is numbered above `change_seq`: every change committed since a reader saw it."""
        with Session(self.engine) as session:
            rows = session.scalars(select(ApiKeyRow).where(ApiKeyRow.change_seq > change_seq))
            return [_key(row) for row in rows]


def _new_row(
    name: str, allow: list[str], deny: list[str], rate_per_second: float | None, created_by: str
) -> tuple[ApiKeyRow, str]:
    """The row of a new key (without its change number) and the key's text; InvalidRequest for a bad field."""
    if not re.match(KEY_NAME_PATTERN, name):
        raise InvalidRequest(f"key name {name!r} must match {KEY_NAME_PATTERN}")
    if not allow:
        raise InvalidRequest("a key needs at least one allow grant, e.g. pub:orders*")
    if rate_per_second is not None and rate_per_second < 0:
        raise InvalidRequest("rate_per_second must be 0 (unlimited) or more")
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
    return row, f"{KEY_PREFIX}{key_id}_{secret}"


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
        change_seq=row.change_seq,
        secret_hash=row.secret_hash,
    )
