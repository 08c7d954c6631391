"""CheckBack against a real broker and a real check-back receiver served on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from libs import webhooks
from libs.broker_api.wire import CHECK_IMMUNITY
from libs.cluster_token import INTERNAL_TOKEN_HEADER
from libs.egress import LOOPBACK_NETWORKS, EgressGuard, system_resolver
from libs.errors import BrokerUnavailable
from libs.events.writer import EventWriter
from libs.producer_groups import ProducerGroupStore
from services.txcheck.brokers import Brokers
from services.txcheck.checkback import MAX_ANSWER_BYTES, CheckBack
from services.txcheck.runtime import RecentProducerGroups, Runtime
from services.txcheck.scan import CheckOrder
from services.txcheck.settings import TxcheckSettings
from tests.support.clock import FakeClock
from tests.support.serving import ServedApp, free_port, serving
from tests.support.txcheck import TxBroker


@dataclass
class Receiver:
    """A producer's check-back endpoint: verifies each request, records it, answers what the test says."""

    secret: str
    status: int = 200
    answer: bytes = b'{"status": "COMMIT"}'
    silent: bool = False
    """Answer nothing until `released` (a producer slower than any timeout)."""
    released: threading.Event = field(default_factory=threading.Event)
    before_answer: Any = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    """every request's headers, verified or not"""

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/checkback")
        async def checkback(request: Request) -> Response:
            body = await request.body()
            self.headers.append(dict(request.headers))
            try:
                webhooks.verify(self.secret, request.headers, body)
            except webhooks.VerificationFailed as exc:
                self.refused.append(str(exc))
                return Response(status_code=401)
            self.requests.append(json.loads(body))
            self.hosts.append(request.headers["host"])
            if self.before_answer is not None:
                await self.before_answer()
            if self.silent:
                await asyncio.to_thread(self.released.wait, 10)
            return Response(self.answer, status_code=self.status, media_type="application/json")

        return app


@pytest.fixture
def receiver(producer_groups: tuple[str, ProducerGroupStore]) -> Iterator[tuple[Receiver, ServedApp]]:
    _, store = producer_groups
    secret = webhooks.new_secret()
    receiver = Receiver(secret)
    with serving(receiver.app()) as served:
        store.put("shop", f"{served.url}/checkback", secret)
        yield receiver, served
        receiver.released.set()


@dataclass
class Zone:
    """A DNS zone the test controls: `producer.test` resolves to `address`; other names as the system says."""

    address: str = "127.0.0.1"
    asked: list[str] = field(default_factory=list)

    def resolve(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        return [self.address] if host == "producer.test" else system_resolver(host, port)


@pytest.fixture
def zone() -> Zone:
    return Zone()


@pytest.fixture
def events(tmp_path: Path) -> Iterator[EventWriter]:
    writer = EventWriter(tmp_path / "export", "txcheck")
    yield writer
    writer.close()


@pytest.fixture
def checkback_timeout() -> float:
    """2 s: a producer that answers at once does so in time on a loaded machine (the suite's other worker)."""
    return 2.0


@pytest.fixture
def checkback(
    tx_broker: TxBroker,
    brokers: Brokers,
    producer_groups: tuple[str, ProducerGroupStore],
    events: EventWriter,
    zone: Zone,
    checkback_timeout: float,
) -> Iterator[CheckBack]:
    _, store = producer_groups
    egress = EgressGuard(LOOPBACK_NETWORKS, zone.resolve)
    with httpx.Client(follow_redirects=False) as producer_http:
        yield CheckBack(brokers, store.find, producer_http, events, timeout=checkback_timeout, egress=egress)


def order_for(broker: TxBroker, stored: dict[str, Any]) -> CheckOrder:
    return CheckOrder(broker.name, broker.served.address, stored["message_id"], stored["physical_offset"])


def check_events(events: EventWriter) -> list[dict[str, Any]]:
    events.flush()
    lines = [
        json.loads(line) for path in sorted(events.root.rglob("*.jsonl")) for line in path.read_text().splitlines()
    ]
    return [e for e in lines if e["event"] == "transaction_check"]


def test_commit_sends_the_signed_request_and_commits_once(
    checkback: CheckBack, tx_broker: TxBroker, receiver: tuple[Receiver, ServedApp], events: EventWriter
) -> None:
    producer, _ = receiver
    stored = tx_broker.put_half("A", {"amount": "42", CHECK_IMMUNITY: "30"})

    assert checkback.check(order_for(tx_broker, stored)) == "COMMIT"
    named = f"broker-a:A.{stored['physical_offset']:x}"  # as the gateway named it when the half was sent

    assert producer.refused == []
    assert producer.requests == [
        {
            "transaction_id": named,
            "message_id": "A",
            "topic": "orders",
            "producer_group": "shop",
            "check_count": 1,
            "tag": "paid",
            "keys": [],
            "properties": {"amount": "42"},
            "body": "pay order 7",
        }
    ]
    assert tx_broker.state("A")["state"] == "COMMITTED"
    assert [(r.message_id, r.body) for r in tx_broker.records("orders", 1)] == [("A", b"pay order 7")]
    (event,) = check_events(events)
    assert {k: event[k] for k in ("message_id", "topic", "transaction_id", "check_count", "answer")} == {
        "message_id": "A",
        "topic": "orders",
        "transaction_id": named,
        "check_count": 1,
        "answer": "COMMIT",
    }
    assert 0 <= event["latency_ms"] < 500


def test_after_a_rotation_both_secrets_sign_until_the_overlap_ends(
    checkback: CheckBack,
    tx_broker: TxBroker,
    receiver: tuple[Receiver, ServedApp],
    producer_groups: tuple[str, ProducerGroupStore],
) -> None:
    producer, _ = receiver
    _, store = producer_groups
    rotated = store.rotate_secret("shop", overlap_seconds=3600)
    assert checkback.check(order_for(tx_broker, tx_broker.put_half("A"))) == "COMMIT", "the old secret stopped"
    producer.secret = rotated.signing_secret
    assert checkback.check(order_for(tx_broker, tx_broker.put_half("B"))) == "COMMIT", "the new secret does not sign"

    store.rotate_secret("shop", overlap_seconds=0)
    assert checkback.check(order_for(tx_broker, tx_broker.put_half("C"))) == "UNKNOWN"
    assert len(producer.refused) == 1, "a secret rotated away without an overlap still signs"


def test_rollback_rolls_back_and_nothing_is_delivered(
    checkback: CheckBack, tx_broker: TxBroker, receiver: tuple[Receiver, ServedApp]
) -> None:
    producer, _ = receiver
    producer.answer = b'{"status": "ROLLBACK"}'
    assert checkback.check(order_for(tx_broker, tx_broker.put_half("A"))) == "ROLLBACK"
    assert tx_broker.state("A")["state"] == "ROLLED_BACK"
    assert tx_broker.records("orders", 1) == []


NOT_AN_ANSWER = [
    (200, b'{"status": "UNKNOWN"}'),
    (500, b'{"status": "COMMIT"}'),
    (404, b""),
    (307, b'{"status": "COMMIT"}'),
    (200, b"COMMIT"),
    (200, b'{"status": "commit"}'),
    (200, b'{"outcome": "COMMIT"}'),
    (200, b'["COMMIT"]'),
    (200, b'{"status": ["COMMIT"]}'),
]


def test_anything_but_a_clear_answer_is_unknown_and_leaves_the_transaction_open(
    checkback: CheckBack, tx_broker: TxBroker, receiver: tuple[Receiver, ServedApp], events: EventWriter
) -> None:
    producer, _ = receiver
    for n, (status, answer) in enumerate(NOT_AN_ANSWER):
        producer.status, producer.answer = status, answer
        result = checkback.check(order_for(tx_broker, tx_broker.put_half(f"A{n}")))
        assert (result, tx_broker.state(f"A{n}")["state"]) == ("UNKNOWN", "OPEN"), f"{status} {answer!r}"
    assert [e["answer"] for e in check_events(events)] == ["UNKNOWN"] * len(NOT_AN_ANSWER)


@pytest.mark.parametrize("checkback_timeout", [0.2])  # the producer never answers: the timeout is all it waits
def test_a_producer_slower_than_the_timeout_is_unknown(
    checkback: CheckBack, tx_broker: TxBroker, receiver: tuple[Receiver, ServedApp]
) -> None:
    producer, _ = receiver
    producer.silent = True
    assert checkback.check(order_for(tx_broker, tx_broker.put_half("A"))) == "UNKNOWN"
    assert tx_broker.state("A")["state"] == "OPEN"


def test_a_dead_endpoint_is_unknown(
    checkback: CheckBack, tx_broker: TxBroker, producer_groups: tuple[str, ProducerGroupStore]
) -> None:
    _, store = producer_groups
    store.put("shop", f"http://127.0.0.1:{free_port()}/checkback")
    reply = checkback.ask(_half(checkback, tx_broker, "A"), "broker-a")
    assert (reply.answer, reply.reason.split(":")[0:2]) == ("UNKNOWN", ["http", "//127.0.0.1"])
    assert "ConnectError" in reply.reason


def _half(checkback: CheckBack, broker: TxBroker, message_id: str) -> Any:
    stored = broker.put_half(message_id)
    return checkback.api.record(broker.ref, stored["physical_offset"])


def test_a_renewed_copy_is_asked_with_its_check_count(
    checkback: CheckBack, tx_broker: TxBroker, receiver: tuple[Receiver, ServedApp]
) -> None:
    producer, _ = receiver
    producer.answer = b'{"status": "UNKNOWN"}'
    stored = tx_broker.put_half("A")
    tx_broker.http.post("/internal/transactions/A/checked", json={"physical_offset": stored["physical_offset"]})
    renewed = [
        r for r in tx_broker.records("RMQ_SYS_TRANS_HALF_TOPIC") if r.physical_offset != stored["physical_offset"]
    ]
    checkback.check(CheckOrder("broker-a", tx_broker.served.address, "A", renewed[0].physical_offset))
    assert [r["check_count"] for r in producer.requests] == [2]


def test_a_binary_body_travels_as_base64(
    checkback: CheckBack, tx_broker: TxBroker, receiver: tuple[Receiver, ServedApp]
) -> None:
    producer, _ = receiver
    record = tx_broker.put_half("A", body=b"\xff\x00")
    checkback.check(order_for(tx_broker, record))
    assert (producer.requests[0].get("body"), producer.requests[0]["body_base64"]) == (None, "/wA=")


def test_an_answer_the_same_way_the_producer_ended_it_meanwhile_is_fine(
    checkback: CheckBack, tx_broker: TxBroker, receiver: tuple[Receiver, ServedApp]
) -> None:
    stored = tx_broker.put_half("A")
    assert tx_broker.end("A", "commit").status_code == 200
    assert checkback.check(order_for(tx_broker, stored)) == "COMMIT"
    assert [r.message_id for r in tx_broker.records("orders", 1)] == ["A"]


def test_a_half_copy_past_retention_is_gone(checkback: CheckBack, tx_broker: TxBroker) -> None:
    assert checkback.check(CheckOrder("broker-a", tx_broker.served.address, "A", 10**9)) == "GONE"


def test_an_answer_the_other_way_than_the_producer_ended_it_changes_nothing(
    checkback: CheckBack, tx_broker: TxBroker, receiver: tuple[Receiver, ServedApp]
) -> None:
    producer, _ = receiver
    stored = tx_broker.put_half("A")

    async def producer_rolls_back_meanwhile() -> None:
        async with httpx.AsyncClient(base_url=tx_broker.served.url) as client:
            await client.post("/internal/transactions/A/rollback", json={"by": "producer"})

    producer.before_answer = producer_rolls_back_meanwhile
    assert checkback.check(order_for(tx_broker, stored)) == "COMMIT"
    assert tx_broker.state("A")["state"] == "ROLLED_BACK"
    assert tx_broker.records("orders", 1) == []


def test_an_unregistered_producer_group_is_unknown(
    checkback: CheckBack, tx_broker: TxBroker, receiver: tuple[Receiver, ServedApp]
) -> None:
    producer, _ = receiver
    stored = tx_broker.put_half("A", group="nobody")
    assert checkback.check(order_for(tx_broker, stored)) == "UNKNOWN"
    assert producer.requests == []


def test_a_broker_that_does_not_answer_raises_for_the_task_to_retry(checkback: CheckBack) -> None:
    with pytest.raises(BrokerUnavailable, match=r"broker broker-a at 127\.0\.0\.1:[0-9]+ did not answer"):
        checkback.check(CheckOrder("broker-a", f"127.0.0.1:{free_port()}", "A", 0))


def test_checks_run_side_by_side_and_only_those_whose_broker_did_not_answer_are_retried(
    checkback: CheckBack, tx_broker: TxBroker, receiver: tuple[Receiver, ServedApp]
) -> None:
    producer, _ = receiver

    all_four_asked = asyncio.Event()  # set and awaited on the receiver's loop only

    async def answer_once_all_four_are_asked() -> None:  # one at a time, each would time out waiting
        if len(producer.requests) >= 4:
            all_four_asked.set()
        with contextlib.suppress(TimeoutError):  # the asserts below then say which ones were not asked
            async with asyncio.timeout(5):
                await all_four_asked.wait()

    producer.before_answer = answer_once_all_four_are_asked
    orders = [order_for(tx_broker, tx_broker.put_half(f"A{n}")) for n in range(4)]
    gone = CheckOrder("broker-b", f"127.0.0.1:{free_port()}", "B", 0)

    with ThreadPoolExecutor(8) as pool:
        outcomes, unanswered = checkback.check_many([*orders, gone], pool)

    assert (outcomes, unanswered) == (["COMMIT"] * 4 + ["RETRY"], [gone])


def test_producer_groups_are_read_again_after_their_ttl(producer_groups: tuple[str, ProducerGroupStore]) -> None:
    _, store = producer_groups
    clock = FakeClock()
    recent = RecentProducerGroups(store, ttl=2.0, clock=clock)
    assert recent("shop") is None
    store.put("shop", "http://127.0.0.1:1/checkback")
    assert recent("shop") is None, "read again within the TTL"
    clock.advance(2.0)
    group = recent("shop")
    assert group is not None
    assert group.checkback_url == "http://127.0.0.1:1/checkback"


def test_a_host_that_rebinds_to_a_private_address_after_its_put_is_refused_at_call_time(
    checkback: CheckBack,
    tx_broker: TxBroker,
    receiver: tuple[Receiver, ServedApp],
    producer_groups: tuple[str, ProducerGroupStore],
    zone: Zone,
    caplog: pytest.LogCaptureFixture,
) -> None:
    producer, served = receiver
    _, store = producer_groups
    store.put("shop", f"http://producer.test:{served.port}/checkback", producer.secret)
    producer.answer = b'{"status": "UNKNOWN"}'
    assert checkback.check(order_for(tx_broker, tx_broker.put_half("A"))) == "UNKNOWN"
    assert len(producer.requests) == 1, "the first check, while producer.test was 127.0.0.1, reached the producer"
    zone.address = "10.0.0.5"
    with caplog.at_level(logging.WARNING, logger="libs.egress"):
        reply = checkback.ask(_half(checkback, tx_broker, "B"), "broker-a")
    assert (reply.answer, reply.reason) == (
        "UNKNOWN",
        "refused: producer.test does not resolve, or not only to public internet addresses; "
        "an operator allows other networks with PETREL_PUSH_ALLOWED_NETWORKS",
    )
    assert "producer.test resolves to 10.0.0.5; refused: 10.0.0.5 (Private-Use" in caplog.text
    assert checkback.check(order_for(tx_broker, tx_broker.put_half("C"))) == "UNKNOWN"
    assert len(producer.requests) == 1, "no request left for the rebound address"
    assert tx_broker.state("C")["state"] == "OPEN"


def test_the_call_goes_to_the_address_checked_with_the_urls_host(
    checkback: CheckBack,
    tx_broker: TxBroker,
    receiver: tuple[Receiver, ServedApp],
    producer_groups: tuple[str, ProducerGroupStore],
    zone: Zone,
) -> None:
    producer, served = receiver
    _, store = producer_groups
    store.put("shop", f"http://producer.test:{served.port}/checkback", producer.secret)
    assert checkback.check(order_for(tx_broker, tx_broker.put_half("A"))) == "COMMIT"
    assert zone.asked == ["producer.test"]
    assert producer.hosts == [f"producer.test:{served.port}"], "the Host header names the URL's host, not 127.0.0.1"
    assert tx_broker.state("A")["state"] == "COMMITTED"


def test_an_answer_past_the_bound_is_unknown(
    checkback: CheckBack, tx_broker: TxBroker, receiver: tuple[Receiver, ServedApp]
) -> None:
    producer, _ = receiver
    producer.answer = b'{"status": "COMMIT", "pad": "' + b"x" * MAX_ANSWER_BYTES + b'"}'
    reply = checkback.ask(_half(checkback, tx_broker, "A"), "broker-a")
    assert (reply.answer, reply.reason) == ("UNKNOWN", f"the answer is longer than {MAX_ANSWER_BYTES} bytes")


def test_the_cluster_token_reaches_the_brokers_and_never_the_producer(
    tmp_path: Path,
    nameserver: ServedApp,
    tx_broker_factory: Any,
    receiver: tuple[Receiver, ServedApp],
    producer_groups: tuple[str, ProducerGroupStore],
) -> None:
    token_file = tmp_path / "cluster.token"
    token_file.write_text("the-cluster-token-of-thirty-two-bytes\n")
    token_file.chmod(0o600)
    broker: TxBroker = tx_broker_factory(internal_token_file=token_file)  # refuses a call without the token
    producer, _ = receiver
    url, _ = producer_groups
    settings = TxcheckSettings(
        data_dir=tmp_path / "data",
        nameservers=[nameserver.address],
        database_url=url,
        events_enabled=False,
        internal_token_file=token_file,
    )
    runtime = Runtime(settings)  # as a txcheck worker opens it
    try:
        assert runtime.checkback.check(order_for(broker, broker.put_half("A"))) == "COMMIT"
    finally:
        runtime.close()

    assert broker.state("A")["state"] == "COMMITTED", "the broker was called with the token"
    assert len(producer.headers) == 1
    (seen,) = producer.headers
    assert INTERNAL_TOKEN_HEADER not in seen
    assert not any("the-cluster-token" in value for value in seen.values()), seen
