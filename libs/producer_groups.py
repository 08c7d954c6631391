"""Producer groups: where txcheck asks a transaction's producer for its outcome, and with what key it signs.

A producer group registers a `checkback_url` (http or https) and a signing secret
in the Standard Webhooks form (libs.webhooks), `whsec_` + base64 of 24 to 64
random bytes, generated when none is given. The gateway writes groups (`PUT
/v1/producer-groups/{group}`); txcheck reads them. Both open the same database:
SQLAlchemy over SQLite by default, PostgreSQL in production (DESIGN section 5).
Calls are synchronous: an async caller runs them in a worker thread.

A rotation (`:rotate-secret`, as push subscriptions have) generates a new secret and
keeps the previous one signing until `previous_secret_until`: meanwhile every check-back
carries both signatures, as Standard Webhooks allows. The previous secret has a table of
its own, so that a database made before rotations existed needs no migration
(`create_all` adds the table).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from sqlalchemy import BigInteger, Engine, MetaData, String, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from libs.errors import AlreadyExists, InvalidRequest, ProducerGroupNotFound
from libs.metadata_db import open_engine
from libs.webhooks import SECRET_PREFIX, InvalidSecret, new_secret, secret_key

MIN_SECRET_BYTES: Final = 24
MAX_SECRET_BYTES: Final = 64
MAX_URL_LENGTH: Final = 2048
HTTP_URL_SCHEMA: Final[dict[str, Any]] = {"pattern": "^[Hh][Tt][Tt][Pp][Ss]?://[^/?#]", "maxLength": MAX_URL_LENGTH}
"""The JSON Schema of what `validate_http_url` takes (an http or https URL with a host), for the spec."""
SIGNING_SECRET_SCHEMA: Final[dict[str, Any]] = {
    "pattern": f"^{SECRET_PREFIX}[A-Za-z0-9+/]+={{0,2}}$",
    "minLength": len(SECRET_PREFIX) + 4 * -(-MIN_SECRET_BYTES // 3),
    "maxLength": len(SECRET_PREFIX) + 4 * -(-MAX_SECRET_BYTES // 3),
}
"""The JSON Schema of what `validate_signing_secret` takes (whsec_ + base64 of 24 to 64 bytes), for the spec."""


class Base(DeclarativeBase):
    metadata = MetaData()


class ProducerGroupRow(Base):
    __tablename__ = "producer_groups"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    checkback_url: Mapped[str] = mapped_column(String(MAX_URL_LENGTH))
    signing_secret: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[int] = mapped_column(BigInteger)


class PreviousSecretRow(Base):
    """A rotated group's previous secret, which signs too until `until` (ms since the epoch)."""

    __tablename__ = "producer_group_previous_secrets"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    signing_secret: Mapped[str] = mapped_column(String(128))
    until: Mapped[int] = mapped_column(BigInteger)


@dataclass(frozen=True, slots=True)
class ProducerGroup:
    name: str
    checkback_url: str
    signing_secret: str = field(repr=False)
    created_at: int
    """ms since the epoch"""
    previous_secret: str | None = field(default=None, repr=False)
    previous_secret_until: int | None = None
    """ms since the epoch: until then the previous secret signs too"""

    def signing_secrets(self, now_ms: int) -> list[str]:
        """The secrets that sign a check-back now: the current one, and the previous one during an overlap."""
        if self.previous_secret and self.previous_secret_until is not None and now_ms < self.previous_secret_until:
            return [self.signing_secret, self.previous_secret]
        return [self.signing_secret]


def open_metadata_engine(url: str) -> Engine:
    """An engine for the shared metadata database at `url`, with the producer-group table created."""
    return open_engine(url, Base.metadata)


def validate_signing_secret(secret: str) -> str:
    """The secret, if it is whsec_ + base64 of 24 to 64 bytes; else InvalidRequest (400) saying what is wrong."""
    if not secret.startswith(SECRET_PREFIX):
        raise InvalidRequest(f"signing_secret must start with {SECRET_PREFIX!r} (Standard Webhooks: whsec_<base64>)")
    try:
        key = secret_key(secret)
    except InvalidSecret as exc:
        raise InvalidRequest(f"signing_secret is not {SECRET_PREFIX}<base64>: {exc}") from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise InvalidRequest(
            f"signing_secret holds {len(key)} bytes; use {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} random bytes"
        )
    return secret


def validate_http_url(url: str, field: str) -> str:
    """The URL, if a service can POST to it (http or https, with a host); else InvalidRequest (400) naming `field`.

    For every URL a user gives Petrel to call (a check-back URL, a push endpoint), before libs.egress resolves it.
    """
    try:
        parts = urlsplit(url)
        host, _port = parts.hostname, parts.port  # .port raises ValueError for a port that is not a number
    except ValueError as exc:
        raise InvalidRequest(f"{field} {url!r} is not a URL: {exc}") from None
    if parts.scheme not in {"http", "https"} or not host:
        raise InvalidRequest(f"{field} {url!r} must be an http or https URL with a host")
    if len(url) > MAX_URL_LENGTH:
        raise InvalidRequest(f"{field} is {len(url)} characters long; the limit is {MAX_URL_LENGTH}")
    return url


def validate_checkback_url(url: str) -> str:
    """The URL, if txcheck can POST to it (http or https, with a host); else InvalidRequest (400)."""
    return validate_http_url(url, "checkback_url")


class ProducerGroupStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def find(self, name: str) -> ProducerGroup | None:
        with Session(self.engine) as session:
            row = session.get(ProducerGroupRow, name)
            return None if row is None else _group(row, session.get(PreviousSecretRow, name))

    def get(self, name: str) -> ProducerGroup:
        group = self.find(name)
        if group is None:
            raise _not_found(name)
        return group

    def put(
        self,
        name: str,
        checkback_url: str | None,
        signing_secret: str | None = None,
        now_ms: int | None = None,
        *,
        create_only: bool = False,
    ) -> tuple[ProducerGroup, bool]:
        """Create or update the group; answers it and whether it was created.

        Read and changed in one transaction (the row locked), so two changes of different fields at once
        both hold. A new group needs its checkback_url (InvalidRequest); an existing one keeps its own
        when none is given. Without a secret a new group gets a generated one and an existing group
        keeps its own (and a rotation's previous one); a given secret replaces both. `create_only`:
        AlreadyExists when the group exists.
        """
        if checkback_url is not None:
            validate_checkback_url(checkback_url)
        if signing_secret is not None:
            validate_signing_secret(signing_secret)
        created_at = int(time.time() * 1000) if now_ms is None else now_ms
        try:
            return self._put(name, checkback_url, signing_secret, created_at, create_only)
        except IntegrityError:  # created by someone else since our read: now it is an update
            return self._put(name, checkback_url, signing_secret, created_at, create_only)

    def _put(
        self, name: str, checkback_url: str | None, signing_secret: str | None, created_at: int, create_only: bool
    ) -> tuple[ProducerGroup, bool]:
        with Session(self.engine) as session, session.begin():
            row = session.get(ProducerGroupRow, name, with_for_update=True)
            created = row is None
            if row is not None and create_only:
                raise AlreadyExists(f"producer group {name!r} exists (If-None-Match: * creates only)")
            if row is None:
                if checkback_url is None:
                    raise InvalidRequest(f"producer group {name!r} is new: its checkback_url is needed")
                row = ProducerGroupRow(name=name, signing_secret=signing_secret or new_secret(), created_at=created_at)
                session.add(row)
            elif signing_secret is not None:
                row.signing_secret = signing_secret
                session.execute(delete(PreviousSecretRow).where(PreviousSecretRow.name == name))
            if checkback_url is not None:
                row.checkback_url = checkback_url
            session.flush()
            return _group(row, session.get(PreviousSecretRow, name)), created

    def rotate_secret(self, name: str, overlap_seconds: int, now_ms: int | None = None) -> ProducerGroup:
        """A new generated secret; the current one keeps signing for `overlap_seconds` (0: it stops at once)."""
        if overlap_seconds < 0:
            raise InvalidRequest("overlap_seconds must not be negative")
        now = int(time.time() * 1000) if now_ms is None else now_ms
        with Session(self.engine) as session, session.begin():
            row = session.get(ProducerGroupRow, name, with_for_update=True)
            if row is None:
                raise _not_found(name)
            session.execute(delete(PreviousSecretRow).where(PreviousSecretRow.name == name))
            previous = None
            if overlap_seconds:
                previous = PreviousSecretRow(
                    name=name, signing_secret=row.signing_secret, until=now + overlap_seconds * 1000
                )
                session.add(previous)
            row.signing_secret = new_secret()
            session.flush()
            return _group(row, previous)

    def list(self) -> list[ProducerGroup]:
        """Every group, by name (code point order, whatever the database's collation)."""
        with Session(self.engine) as session:
            previous = {p.name: p for p in session.scalars(select(PreviousSecretRow))}
            groups = [_group(r, previous.get(r.name)) for r in session.scalars(select(ProducerGroupRow))]
        return sorted(groups, key=lambda g: g.name)


def _not_found(name: str) -> ProducerGroupNotFound:
    return ProducerGroupNotFound(f"no producer group {name!r}: register it with PUT /v1/producer-groups/{name}")


def _group(row: ProducerGroupRow, previous: PreviousSecretRow | None) -> ProducerGroup:
    if previous is None:
        return ProducerGroup(row.name, row.checkback_url, row.signing_secret, row.created_at)
    return ProducerGroup(
        row.name, row.checkback_url, row.signing_secret, row.created_at, previous.signing_secret, previous.until
    )
