"""Metadata databases for tests: a SQLite file, or a private schema in the real PostgreSQL.

PostgreSQL is the one on 127.0.0.1:5432 (trust auth, database `test`), or the URL in
`PETREL_TEST_POSTGRES_URL`. Each test gets its own schema (the URL sets the
connection's search_path to it), dropped afterwards, so tests never see each other's rows.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError

POSTGRES_URL = os.environ.get("PETREL_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BACKENDS = ("sqlite", "postgresql")


@contextlib.contextmanager
def postgres_schema() -> Iterator[str]:
    """The URL of a fresh schema in the test PostgreSQL, dropped on exit."""
    schema = f"petrel_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL)
    try:
        with admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    except OperationalError as exc:
        admin.dispose()
        raise AssertionError(f"the test PostgreSQL at {POSTGRES_URL} did not answer: {exc}") from exc
    try:
        yield (
            make_url(POSTGRES_URL)
            .update_query_dict({"options": f"-csearch_path={schema}"})
            .render_as_string(hide_password=False)
        )
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@contextlib.contextmanager
def metadata_database(backend: str, folder: Path) -> Iterator[str]:
    """The URL of an empty database of `backend` ("sqlite" or "postgresql")."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'metadata.db'}"
    else:
        with postgres_schema() as url:
            yield url
