"""Fixtures for txcheck: a served broker with transactions, a private Redis key prefix, the producer groups."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import redis

from libs.codec import encode_record, iter_records
from libs.http.client import ClientOptions
from libs.message import MessageRecord, Prop
from libs.producer_groups import ProducerGroupStore, open_metadata_engine
from services.broker.app import create_app as broker_app
from services.txcheck.brokers import Broker, Brokers, open_brokers
from tests.conftest import broker_settings
from tests.support.serving import ServedApp, serving

REDIS_URL = "redis://127.0.0.1:6379/0"


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


@dataclass
class TxBroker:
    """A broker served on loopback, and the calls a producer and a test make to it."""

    served: ServedApp
    http: httpx.Client
    name: str = "broker-a"

    @property
    def ref(self) -> Broker:
        return Broker(self.name, self.served.address)

    def put_half(
        self, message_id: str, props: dict[str, str] | None = None, *, body: bytes = b"pay order 7", group: str = "shop"
    ) -> dict[str, Any]:
        properties = {
            Prop.UNIQ_KEY: message_id,
            Prop.PRODUCER_GROUP: group,
            Prop.TRANSACTION_PREPARED: "true",
            Prop.TAGS: "paid",
        } | (props or {})
        record = MessageRecord(topic="orders", body=body, queue_id=1, properties=properties)
        answer = self.http.post("/internal/messages", content=encode_record(record))
        assert answer.status_code == 200, answer.text
        stored: dict[str, Any] = answer.json()["stored"][0]
        return stored

    def end(self, message_id: str, verb: str) -> httpx.Response:
        return self.http.post(f"/internal/transactions/{message_id}/{verb}", json={"by": "producer"})

    def state(self, message_id: str) -> dict[str, Any]:
        answer = self.http.get(f"/internal/transactions/{message_id}")
        assert answer.status_code == 200, answer.text
        state: dict[str, Any] = answer.json()
        return state

    def records(self, topic: str, queue: int = 0) -> list[MessageRecord]:
        answer = self.http.get(f"/internal/topics/{topic}/queues/{queue}/messages", params={"offset": 0, "max": 1000})
        assert answer.status_code == 200, answer.text
        return list(iter_records(answer.content))


@pytest.fixture
def tx_broker_factory(nameserver: ServedApp) -> Iterator[Any]:
    opened: list[tuple[Any, httpx.Client]] = []

    def open_broker(**overrides: object) -> TxBroker:
        settings = broker_settings(nameserver, **cast(dict[str, Any], overrides))
        context = serving(broker_app(settings), settings.port)
        served = context.__enter__()
        http = httpx.Client(base_url=served.url, timeout=10)
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
