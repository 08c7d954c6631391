"""SQLAlchemy engines for metadata tables: SQLite (WAL) by default, PostgreSQL in production.

A service opens an engine from a URL and creates its tables there (`create_all`
only adds what is missing). Two processes may open the same database at once
(the gateway and txcheck share the producer groups): when one creates a table
between the other's check and its CREATE, the other's create_all is repeated.

A SQLite file is private (0600, libs.private_files): it holds signing secrets
(producer groups, push subscriptions). It is created so before SQLite opens it,
and SQLite gives its -wal, -shm and -journal files the database's mode; a file
found more open, or a sibling, is narrowed at start with a warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from sqlalchemy import Engine, MetaData, create_engine, event, make_url
from sqlalchemy.exc import DatabaseError

from libs.private_files import ensure_private

SQLITE_SIBLINGS: Final = ("-wal", "-shm", "-journal")


def open_engine(url: str, metadata: MetaData) -> Engine:
    """An engine for `url` with `metadata`'s tables created; a SQLite file made private."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        _make_private(parsed.database)
        engine = create_engine(url)
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    try:
        metadata.create_all(engine)
    except DatabaseError:
        metadata.create_all(engine)  # another process created a table first; now it is there
    return engine


def _make_private(database: str | None) -> None:
    if database and database != ":memory:" and not database.startswith("file:"):
        path = Path(database)
        ensure_private(path)
        for suffix in SQLITE_SIBLINGS:
            ensure_private(path.with_name(path.name + suffix), create=False)


def _sqlite_pragmas(connection: object, _record: object) -> None:
    cursor = connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()
