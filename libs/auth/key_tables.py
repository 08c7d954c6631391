"""The API keys' tables, their change numbers, and bringing an older database up to date.

`api_keys` holds a row per key. Each change of a row (created, revoked) takes the next
number from the one row of `api_key_counter` in the same transaction and writes it in
the row's `change_seq`. Taking it updates that row, which locks it until the transaction
ends, so writers take their numbers one after the other and commit in that order: a
reader that sees change 11 also sees change 10. Gateways read what changed after the
highest number they saw (`KeyStore.changed_after`), so no change is skipped, whatever the
clocks of the hosts that wrote them say (`changed_at` stays, for people). PostgreSQL locks
the counter's row; SQLite has one writer at a time anyway.

A database made before change numbers gets them when a process opens it (`migrate`):
the column and its index are added, and rows without a number are numbered, in the
order of their `changed_at`, under the counter's lock. A row written later by an older
Petrel (which knows nothing of the counter) is numbered at the next start of a newer
one: upgrade every gateway and `petrel keys` together.
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import JSON, BigInteger, Engine, Float, MetaData, String, inspect, select, text, update
from sqlalchemy.exc import DatabaseError, IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

CHANGES: Final = "changes"
"""The counter row's name."""


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
    change_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True, index=True)
    """None only in a row an older Petrel wrote, until `migrate` numbers it"""


class KeyCounterRow(Base):
    __tablename__ = "api_key_counter"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)


def claim_changes(session: Session, count: int = 1) -> int:
    """The last of `count` new change numbers. Call it first in a transaction: its lock then orders the writers,
    and a SQLite transaction that writes before it reads never finds its snapshot outdated."""
    named = KeyCounterRow.name == CHANGES
    session.execute(update(KeyCounterRow).where(named).values(value=KeyCounterRow.value + count))
    value: int | None = session.scalar(select(KeyCounterRow.value).where(named))
    if value is None:
        raise RuntimeError("the api_key_counter row is missing: open the database with open_key_engine")
    return value


def migrate(engine: Engine) -> None:
    """Bring tables `create_all` made long ago up to date (safe while other processes do the same)."""
    _add_change_column(engine)
    _add_counter_row(engine)
    _number_unnumbered_rows(engine)


def _add_change_column(engine: Engine) -> None:
    if _has_change_column(engine):
        return
    try:
        with engine.begin() as connection:
            connection.execute(text("ALTER TABLE api_keys ADD COLUMN change_seq BIGINT"))
    except DatabaseError:
        if not _has_change_column(engine):  # not another process's ALTER first: a real failure
            raise
    try:
        with engine.begin() as connection:
            connection.execute(text("CREATE INDEX IF NOT EXISTS ix_api_keys_change_seq ON api_keys (change_seq)"))
    except DatabaseError:  # another process created it between the check and the create (PostgreSQL)
        with engine.begin() as connection:
            connection.execute(text("CREATE INDEX IF NOT EXISTS ix_api_keys_change_seq ON api_keys (change_seq)"))


def _has_change_column(engine: Engine) -> bool:
    return "change_seq" in {column["name"] for column in inspect(engine).get_columns("api_keys")}


def _add_counter_row(engine: Engine) -> None:
    with Session(engine) as session:
        if session.get(KeyCounterRow, CHANGES) is not None:
            return
    try:
        with Session(engine) as session, session.begin():
            session.add(KeyCounterRow(name=CHANGES, value=0))
    except IntegrityError:
        pass  # another process added it first


def _number_unnumbered_rows(engine: Engine) -> None:
    unnumbered = select(ApiKeyRow).where(ApiKeyRow.change_seq.is_(None))
    with Session(engine) as session:
        if session.scalars(unnumbered.limit(1)).first() is None:
            return
    with Session(engine) as session, session.begin():
        last = claim_changes(session, 0)  # the lock first: another process numbering at once waits, then finds none
        rows = session.scalars(unnumbered.order_by(ApiKeyRow.changed_at, ApiKeyRow.key_id)).all()
        for number, row in enumerate(rows, start=last + 1):
            row.change_seq = number
        claim_changes(session, len(rows))
