"""ProducerGroupStore on SQLite and on the real PostgreSQL: the same contract on both."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from libs.errors import AlreadyExists, InvalidRequest, ProducerGroupNotFound
from libs.producer_groups import (
    ProducerGroup,
    ProducerGroupStore,
    open_metadata_engine,
    validate_checkback_url,
    validate_signing_secret,
)
from libs.webhooks import new_secret, secret_key
from tests.support.databases import BACKENDS, metadata_database

SECRET = "whsec_" + base64.b64encode(bytes(range(24))).decode()


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with metadata_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = open_metadata_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def store(engine: Engine) -> ProducerGroupStore:
    return ProducerGroupStore(engine)


def test_put_creates_a_group_with_a_generated_secret(store: ProducerGroupStore) -> None:
    group, created = store.put("orders", "https://shop.example/checkback", now_ms=1_700_000_000_000)

    assert created
    assert (group.name, group.checkback_url, group.created_at) == (
        "orders",
        "https://shop.example/checkback",
        1_700_000_000_000,
    )
    assert group.signing_secret.startswith("whsec_")
    assert len(secret_key(group.signing_secret)) == 24
    assert store.get("orders") == group


def test_put_again_updates_the_url_and_keeps_the_secret_and_creation_time(store: ProducerGroupStore) -> None:
    first, _ = store.put("orders", "http://a.example/", now_ms=1000)
    second, created = store.put("orders", "http://b.example/", now_ms=2000)

    assert not created
    assert second == ProducerGroup("orders", "http://b.example/", first.signing_secret, 1000)
    assert store.get("orders") == second


def test_a_put_without_a_url_keeps_the_groups_and_a_new_group_needs_one(store: ProducerGroupStore) -> None:
    store.put("orders", "http://a.example/", now_ms=1000)
    kept, created = store.put("orders", None, SECRET)
    assert not created
    assert kept == ProducerGroup("orders", "http://a.example/", SECRET, 1000)
    with pytest.raises(InvalidRequest, match="checkback_url is needed"):
        store.put("payments", None)
    with pytest.raises(ProducerGroupNotFound):
        store.get("payments")


def test_a_create_only_put_of_an_existing_group_changes_nothing(store: ProducerGroupStore) -> None:
    first, created = store.put("orders", "http://a.example/", create_only=True)
    assert created
    with pytest.raises(AlreadyExists):
        store.put("orders", "http://b.example/", SECRET, create_only=True)
    assert store.get("orders") == first


def test_a_given_secret_is_kept_and_replaces_the_old_one(store: ProducerGroupStore) -> None:
    group, _ = store.put("orders", "http://a.example/", SECRET)
    assert group.signing_secret == SECRET

    rotated = new_secret(64)
    assert store.put("orders", "http://a.example/", rotated)[0].signing_secret == rotated
    assert store.get("orders").signing_secret == rotated


def test_a_rotation_makes_a_new_secret_and_the_old_one_signs_until_the_overlap_ends(store: ProducerGroupStore) -> None:
    old = store.put("orders", "http://a.example/", SECRET)[0].signing_secret
    rotated = store.rotate_secret("orders", overlap_seconds=60, now_ms=1_000_000)

    assert rotated.signing_secret not in (old, SECRET)
    assert (rotated.previous_secret, rotated.previous_secret_until) == (old, 1_060_000)
    assert store.get("orders") == rotated
    assert rotated.signing_secrets(1_059_999) == [rotated.signing_secret, old]
    assert rotated.signing_secrets(1_060_000) == [rotated.signing_secret]
    assert store.put("orders", "http://b.example/")[0].signing_secrets(0) == [rotated.signing_secret, old]

    again = store.rotate_secret("orders", overlap_seconds=0, now_ms=1_000_000)
    assert again.signing_secrets(0) == [again.signing_secret], "an overlap of 0 stops the old secret at once"
    store.rotate_secret("orders", overlap_seconds=60)
    assert store.put("orders", "http://b.example/", SECRET)[0].signing_secrets(0) == [SECRET], (
        "a secret given in a PUT replaces both"
    )
    with pytest.raises(ProducerGroupNotFound):
        store.rotate_secret("nobody", overlap_seconds=60)


def test_a_database_made_before_rotations_opens_and_keeps_its_groups(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with create_engine(url).begin() as connection:  # the producer_groups table as releases before it made it
        connection.execute(
            text(
                "CREATE TABLE producer_groups (name VARCHAR(255) PRIMARY KEY, checkback_url VARCHAR(2048) NOT NULL,"
                " signing_secret VARCHAR(128) NOT NULL, created_at BIGINT NOT NULL)"
            )
        )
        connection.execute(text(f"INSERT INTO producer_groups VALUES ('orders', 'http://a.example/', '{SECRET}', 5)"))
    engine = open_metadata_engine(url)
    try:
        store = ProducerGroupStore(engine)
        assert store.get("orders") == ProducerGroup("orders", "http://a.example/", SECRET, 5)
        assert store.rotate_secret("orders", overlap_seconds=60).previous_secret == SECRET
    finally:
        engine.dispose()


def test_an_unknown_group_is_not_found(store: ProducerGroupStore) -> None:
    assert store.find("nobody") is None
    with pytest.raises(ProducerGroupNotFound) as caught:
        store.get("nobody")
    assert caught.value.detail == "no producer group 'nobody': register it with PUT /v1/producer-groups/nobody"


def test_list_is_every_group_by_name(store: ProducerGroupStore) -> None:
    assert store.list() == []
    for name in ("zeta", "Alpha", "beta"):
        store.put(name, f"http://{name.lower()}.example/")
    assert [g.name for g in store.list()] == ["Alpha", "beta", "zeta"]


def test_a_second_engine_on_the_same_database_sees_the_groups(store: ProducerGroupStore, database_url: str) -> None:
    """The gateway writes groups and txcheck reads them, each with its own engine (and create_all)."""
    group, _ = store.put("orders", "http://a.example/")
    other = open_metadata_engine(database_url)
    try:
        assert ProducerGroupStore(other).get("orders") == group
    finally:
        other.dispose()


def test_concurrent_creates_of_one_group_create_it_once(store: ProducerGroupStore) -> None:
    start = threading.Barrier(4)
    results: list[bool] = []

    def put(index: int) -> None:
        start.wait()
        results.append(store.put("orders", f"http://{index}.example/")[1])

    threads = [threading.Thread(target=put, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False, False, False, True]
    assert [g.name for g in store.list()] == ["orders"]


@pytest.mark.parametrize(
    ("secret", "detail"),
    [
        ("s3cret", "signing_secret must start with 'whsec_' (Standard Webhooks: whsec_<base64>)"),
        ("whsec_not base64!", "signing_secret is not whsec_<base64>: "),
        ("whsec_" + base64.b64encode(b"x" * 23).decode(), "signing_secret holds 23 bytes; use 24 to 64 random bytes"),
        ("whsec_" + base64.b64encode(b"x" * 65).decode(), "signing_secret holds 65 bytes; use 24 to 64 random bytes"),
    ],
)
def test_a_bad_secret_is_refused(store: ProducerGroupStore, secret: str, detail: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        store.put("orders", "http://a.example/", secret)
    assert caught.value.detail.startswith(detail)
    assert store.find("orders") is None


@pytest.mark.parametrize(
    ("url", "detail"),
    [
        ("ftp://files.example/x", "checkback_url 'ftp://files.example/x' must be an http or https URL with a host"),
        ("http:///path", "checkback_url 'http:///path' must be an http or https URL with a host"),
        ("shop.example/checkback", "checkback_url 'shop.example/checkback' must be an http or https URL with a host"),
        ("", "checkback_url '' must be an http or https URL with a host"),
        ("http://shop.example:port/", "checkback_url 'http://shop.example:port/' is not a URL: "),
        ("http://[::1/", "checkback_url 'http://[::1/' is not a URL: "),
    ],
)
def test_a_checkback_url_that_is_not_http_is_refused(store: ProducerGroupStore, url: str, detail: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        store.put("orders", url)
    assert caught.value.detail.startswith(detail)
    assert store.find("orders") is None


def test_http_and_https_urls_with_ports_and_paths_are_accepted() -> None:
    for url in ("http://127.0.0.1:9000/tx", "https://shop.example/checkback?team=a", "HTTP://[::1]:80/"):
        assert validate_checkback_url(url) == url


def test_generated_secrets_are_valid_and_distinct(store: ProducerGroupStore) -> None:
    secrets = {store.put(f"g{i}", "http://a.example/")[0].signing_secret for i in range(20)}
    assert len(secrets) == 20
    assert all(validate_signing_secret(s) == s for s in secrets)


def test_the_secret_is_not_in_the_repr() -> None:
    group = ProducerGroup("orders", "http://a.example/", SECRET, 0)
    assert SECRET not in repr(group)
    assert "orders" in repr(group)


def test_the_sqlite_file_and_its_folder_are_made(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / "metadata.db"
    engine = open_metadata_engine(f"sqlite:///{path}")
    try:
        ProducerGroupStore(engine).put("orders", "http://a.example/")
    finally:
        engine.dispose()
    assert path.is_file()
