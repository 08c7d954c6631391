"""Fixtures for txcheck: a served broker with transactions, a private Redis key prefix, the producer groups."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import redis

from libs.cluster_token import INTERNAL_TOKEN_HEADER
from libs.http.client import ClientOptions
from libs.producer_groups import ProducerGroupStore, open_metadata_engine
from services.broker.app import create_app as broker_app
from services.txcheck.brokers import Brokers, open_brokers
from tests.support.apps import broker_settings
from tests.support.serving import ServedApp, serving
from tests.support.txcheck import REDIS_URL, TxBroker


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A key prefix of this test's own in the real Redis; its keys are deleted afterwards."""
    prefix = f"petrel-test:{uuid.uuid4().hex[:12]}:"
    yield prefix
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=prefix + "*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


@pytest.fixture
def tx_broker_factory(nameserver: ServedApp) -> Iterator[Any]:
    opened: list[tuple[Any, httpx.Client]] = []

    def open_broker(**overrides: object) -> TxBroker:
        settings = broker_settings(nameserver, **cast(dict[str, Any], overrides))
        context = serving(broker_app(settings), settings.port)
        served = context.__enter__()
        token = settings.cluster_token()  # a broker given a token asks the test's own calls for it too
        http = httpx.Client(base_url=served.url, timeout=10, headers={INTERNAL_TOKEN_HEADER: token} if token else {})
        opened.append((context, http))
        assert http.put("/internal/topics/orders", json={"read_queues": 2, "write_queues": 2}).status_code in {200, 201}
        return TxBroker(served, http, settings.broker_name)

    yield open_broker
    for context, http in reversed(opened):
        http.close()
        context.__exit__(None, None, None)


@pytest.fixture
def tx_broker(tx_broker_factory: Any) -> TxBroker:
    broker: TxBroker = tx_broker_factory()
    return broker


@pytest.fixture
def producer_groups(tmp_path: Path) -> Iterator[tuple[str, ProducerGroupStore]]:
    """The shared metadata database's URL (SQLite) and a store over it."""
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    engine = open_metadata_engine(url)
    yield url, ProducerGroupStore(engine)
    engine.dispose()


@pytest.fixture
def brokers(nameserver: ServedApp) -> Iterator[Brokers]:
    """txcheck's calls to the nameserver and brokers, as its runtime opens them."""
    with open_brokers([nameserver.address], ClientOptions(timeout=5, retry_backoff=0.001)) as opened:
        yield opened
