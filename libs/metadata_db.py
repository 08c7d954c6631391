"""SQLAlchemy engines for metadata tables: SQLite (WAL) by default, PostgreSQL in production.

A service opens an engine from a URL and creates its tables there (`create_all`
only adds what is missing). Two processes may open the same database at once
(the gateway and txcheck share the producer groups): when one creates a table
between the other's check and its CREATE, the other's create_all is repeated.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, MetaData, create_engine, event, make_url
from sqlalchemy.exc import DatabaseError


def open_engine(url: str, metadata: MetaData) -> Engine:
    """An engine for `url` with `metadata`'s tables created; a SQLite file's folder is made when missing."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        _make_folder(parsed.database)
        engine = create_engine(url)
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    try:
        metadata.create_all(engine)
    except DatabaseError:
        metadata.create_all(engine)  # another process created a table first; now it is there
    return engine


def _make_folder(database: str | None) -> None:
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)


def _sqlite_pragmas(connection: object, _record: object) -> None:
    cursor = connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()
