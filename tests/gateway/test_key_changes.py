"""A gateway's copy of the keys follows every change, on SQLite and on the real PostgreSQL (issue 25, finding 6).

Two processes write keys here as gateways and `petrel keys` do: a writer (another host)
and the gateway's KeyDirectory, each with its own engine on the same database. The
directory is refreshed by hand, so nothing waits for its interval.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import BigInteger, Column, Engine, Float, MetaData, String, Table, create_engine, event, text
from sqlalchemy.types import JSON

from gateway.auth.directory import KeyDirectory
from libs.auth.keys import KeyStore, open_key_engine
from libs.errors import Unauthorized
from tests.support.databases import BACKENDS, metadata_database
from tests.support.waiting import eventually

DAY_MS = 86_400_000


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with metadata_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def stores(database_url: str) -> Iterator[list[KeyStore]]:
    """Key stores on the test's database, each with its own engine (opened by `store()`), disposed after."""
    opened: list[KeyStore] = []
    yield opened
    for store in opened:
        store.engine.dispose()


@pytest.fixture
def store(stores: list[KeyStore], database_url: str) -> Any:
    def open_store() -> KeyStore:
        stores.append(KeyStore(open_key_engine(database_url)))
        return stores[-1]

    return open_store


async def refused(directory: KeyDirectory, key: str) -> bool:
    try:
        await directory.authenticate(f"Bearer {key}")
    except Unauthorized as exc:
        return "revoked" in exc.detail
    return False


async def test_a_key_dated_a_day_ahead_hides_no_later_revocation(store: Any) -> None:
    writer = store()
    victim, victim_text = writer.create("victim", ["sub"])
    directory = KeyDirectory(store(), refresh_seconds=3600, default_rate=0)
    await directory.load()
    assert (await directory.authenticate(f"Bearer {victim_text}")).name == "victim"

    ahead, _ = writer.create("ahead", ["sub"])  # written by a host whose clock runs a day ahead
    with writer.engine.begin() as connection:
        moved = text("UPDATE api_keys SET changed_at = changed_at + :day WHERE key_id = :key_id")
        connection.execute(moved, {"day": DAY_MS, "key_id": ahead.key_id})
    await directory.refresh()
    writer.revoke(victim.key_id)  # by a host with the right time
    await directory.refresh()
    assert await refused(directory, victim_text), "a revocation after a future-dated key was not seen"


async def test_two_writers_committing_in_either_order_are_both_seen(store: Any, database_url: str) -> None:
    first, second = store(), store()
    made = [first.create(name, ["sub"]) for name in ("a", "b")]
    directory = KeyDirectory(store(), refresh_seconds=3600, default_rate=0)
    await directory.load()
    committing, release = threading.Event(), threading.Event()

    def hold_the_commit(_connection: object) -> None:  # the first writer stops just before its COMMIT
        committing.set()
        release.wait(10)

    event.listen(first.engine, "commit", hold_the_commit)
    revoking_first = asyncio.create_task(asyncio.to_thread(first.revoke, made[0][0].key_id))
    assert await asyncio.to_thread(committing.wait, 10)
    counting = _counter_statements(second.engine)
    revoking_second = asyncio.create_task(asyncio.to_thread(second.revoke, made[1][0].key_id))

    async def second_done_or_waiting() -> bool:
        return revoking_second.done() or await asyncio.to_thread(_waits_for_the_counter, database_url, counting)

    await eventually(second_done_or_waiting, "the second writer finished or waits for the first")
    await directory.refresh()  # whatever is committed now: the second's change alone, if it could commit first
    release.set()
    await asyncio.gather(revoking_first, revoking_second)
    await directory.refresh()
    assert [await refused(directory, key) for _, key in made] == [True, True]


async def test_a_database_made_before_change_numbers_is_brought_up_to_date(database_url: str, store: Any) -> None:
    old = create_engine(database_url)
    _old_api_keys_table(MetaData()).metadata.create_all(old)
    with old.begin() as connection:
        connection.execute(text(OLD_ROW), {"hash": hashlib.sha256(b"A" * 43).hexdigest(), "at": 1_700_000_000_000})
    old.dispose()
    writer, directory_store = store(), store()  # both migrate, one after the other: the second finds nothing to do
    directory = KeyDirectory(directory_store, refresh_seconds=3600, default_rate=0)
    await directory.load()
    assert [key.change_seq for key in writer.list_keys()] == [1]
    _, made = writer.create("new", ["sub"])
    writer.revoke("0123456789ab")
    await directory.refresh()
    assert (await directory.authenticate(f"Bearer {made}")).name == "new"
    assert await refused(directory, OLD_KEY)
    assert sorted(key.change_seq or 0 for key in writer.list_keys()) == [2, 3]


def _counter_statements(engine: Engine) -> threading.Event:
    """Set when `engine` sends a statement on the change counter (on SQLite it then waits for the lock)."""
    sent = threading.Event()

    def before(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if "api_key_counter" in statement:
            sent.set()

    event.listen(engine, "before_cursor_execute", before)
    return sent


def _waits_for_the_counter(database_url: str, counting: threading.Event) -> bool:
    """A writer waits for the counter's lock: on PostgreSQL a backend waiting on it; on SQLite, having asked for it."""
    if database_url.startswith("sqlite"):
        return counting.is_set()
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            waiting = text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND query LIKE '%api_key_counter%'"
            )
            return bool(connection.scalar(waiting))
    finally:
        engine.dispose()


OLD_KEY = "ptk_0123456789ab_" + "A" * 43
OLD_ROW = (
    "INSERT INTO api_keys (key_id, name, secret_hash, allow, deny, rate_per_second, created_at, created_by,"
    " revoked_at, changed_at) VALUES ('0123456789ab', 'old', :hash, '[\"sub\"]', '[]', NULL, :at, 'cli', NULL, :at)"
)


def _old_api_keys_table(metadata: MetaData) -> Table:
    """api_keys as Petrel made it before change numbers."""
    return Table(
        "api_keys",
        metadata,
        Column("key_id", String(12), primary_key=True),
        Column("name", String(128)),
        Column("secret_hash", String(64)),
        Column("allow", JSON),
        Column("deny", JSON),
        Column("rate_per_second", Float, nullable=True),
        Column("created_at", BigInteger),
        Column("created_by", String(160)),
        Column("revoked_at", BigInteger, nullable=True),
        Column("changed_at", BigInteger, index=True),
    )
