"""Transactions on real processes and the real Redis: check-backs by txcheck's Celery worker and beat, and crashes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from libs import webhooks
from libs.broker_api.transaction_ids import parse_transaction_id
from tests.support.cluster import LocalCluster, local_cluster_with_txcheck
from tests.support.serving import ServedApp, serving
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e

ENDED = {"COMMITTED", "ROLLED_BACK"}


class Producer:
    """A producer's check-back endpoint: verifies the signature, answers by the body ("commit ..." or "rollback ...").

    While `unsure`, it answers UNKNOWN (its local transactions are still running); a body starting
    with "unsure" gets UNKNOWN at its first check and COMMIT afterwards.
    """

    def __init__(self) -> None:
        self.secret = ""
        self.unsure = False
        self.delay = 0.0
        self.checks: list[dict[str, Any]] = []
        self.refused = 0

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/checkback")
        async def checkback(request: Request) -> Response:
            raw = await request.body()
            try:
                webhooks.verify(self.secret, request.headers, raw)
            except webhooks.VerificationFailed:
                self.refused += 1
                return Response(status_code=401)
            check = json.loads(raw)
            self.checks.append(check)
            await asyncio.sleep(self.delay)
            return Response(json.dumps({"status": self.decide(check)}), media_type="application/json")

        return app

    def decide(self, check: dict[str, Any]) -> str:
        body = check["body"]
        if self.unsure or (body.startswith("unsure") and check["check_count"] == 1):
            return "UNKNOWN"
        return "ROLLBACK" if body.startswith("rollback") else "COMMIT"

    def asked_about(self, transaction_id: str) -> list[int]:
        return [c["check_count"] for c in self.checks if c["transaction_id"] == transaction_id]


@pytest.fixture
def producer() -> Iterator[tuple[Producer, ServedApp]]:
    producer = Producer()
    with serving(producer.app()) as served:
        yield producer, served


class Shop:
    """The producer group and the topic its transactions send to, through a client of the cluster's gateway."""

    def __init__(self, client: httpx.AsyncClient, group: str = "shop", topic: str = "orders") -> None:
        self.client, self.group, self.topic = client, group, topic

    async def register(self, producer: Producer, served: ServedApp) -> None:
        body = {"checkback_url": f"{served.url}/checkback"}
        answer = await self.client.put(f"/v1/producer-groups/{self.group}", json=body)
        assert answer.status_code == 201, answer.text
        producer.secret = answer.json()["signing_secret"]
        assert (await self.client.put(f"/v1/topics/{self.topic}", json={"queues": 2})).status_code == 201

    async def begin(self, body: str, **extra: Any) -> str:
        sent = {"body": body, "producer_group": self.group} | extra
        answer = await self.client.post(f"/v1/topics/{self.topic}/transactions", json=sent)
        assert answer.status_code == 201, answer.text
        transaction_id: str = answer.json()["transaction_id"]
        return transaction_id

    async def delivered(self) -> list[str]:
        """The message ids in the topic, every queue, in order (duplicates kept)."""
        ids = []
        for queue in range(2):
            path = f"/v1/topics/{self.topic}/queues/{queue}/messages"
            answer = await self.client.get(path, params={"offset": 0, "max": 256})
            assert answer.status_code == 200, answer.text
            ids += [m["message_id"] for m in answer.json()["messages"]]
        return ids


async def states(client: httpx.AsyncClient, transaction_ids: list[str]) -> dict[str, str]:
    found = {}
    for transaction_id in transaction_ids:
        answer = await client.get(f"/v1/transactions/{transaction_id}")
        found[transaction_id] = answer.json()["state"] if answer.status_code == 200 else f"HTTP {answer.status_code}"
    return found


async def all_ended(
    client: httpx.AsyncClient, transaction_ids: list[str], cluster: LocalCluster, timeout: float
) -> dict[str, str]:
    found: dict[str, str] = {}

    async def ended() -> bool:
        found.update(await states(client, transaction_ids))
        return set(found.values()) <= ENDED

    def why() -> str:
        open_ones = {t: s for t, s in found.items() if s not in ENDED}
        return f"still open: {open_ones}\nworker log:\n{cluster.log('txcheck-worker')[-3000:]}"

    await eventually(ended, "every transaction ended", timeout, context=why)
    return found


def message_id(transaction_id: str) -> str:
    named = parse_transaction_id(transaction_id)
    assert named is not None, transaction_id
    return named.message_id


def check_events(data_dir: Path, transaction_ids: list[str]) -> list[dict[str, Any]]:
    """txcheck's exported `transaction_check` events of these transactions."""
    lines = [
        json.loads(line)
        for path in (data_dir / "export" / "events").rglob("txcheck-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    return [e for e in lines if e["event"] == "transaction_check" and e["transaction_id"] in transaction_ids]


async def test_forgotten_transactions_are_resolved_by_check_backs_and_ended_ones_are_never_asked(
    core_txcheck: LocalCluster,
    core_gateway: httpx.AsyncClient,
    producer: tuple[Producer, ServedApp],
    unique: Callable[[str], str],
) -> None:
    receiver, served = producer
    client, shop = core_gateway, Shop(core_gateway, unique("shop"), unique("orders"))
    await shop.register(receiver, served)
    by_producer = [await shop.begin(f"{verb} by the producer", check_immunity_seconds=60) for verb in ("c", "r")]
    assert (await client.post(f"/v1/transactions/{by_producer[0]}/commit")).json()["outcome"] == "COMMIT"
    assert (await client.post(f"/v1/transactions/{by_producer[1]}/rollback")).json()["outcome"] == "ROLLBACK"
    forgotten = [await shop.begin(body) for body in ("commit 1", "rollback 2", "unsure 3")]

    found = await all_ended(client, forgotten, core_txcheck, timeout=20)

    assert list(found.values()) == ["COMMITTED", "ROLLED_BACK", "COMMITTED"]
    assert sorted(await shop.delivered()) == sorted(message_id(t) for t in (by_producer[0], forgotten[0], forgotten[2]))
    assert [receiver.asked_about(t) for t in (*by_producer, *forgotten)] == [[], [], [1], [1], [1, 2]]
    assert receiver.refused == 0
    (first, *_) = receiver.checks
    assert (first["topic"], first["producer_group"], first["keys"], first["properties"]) == (
        shop.topic,
        shop.group,
        [],
        {},
    )
    expected = [(forgotten[0], 1, "COMMIT"), (forgotten[1], 1, "ROLLBACK"), (forgotten[2], 1, "UNKNOWN")]
    expected.append((forgotten[2], 2, "COMMIT"))

    def answers() -> list[tuple[str, int, str]]:
        events = check_events(core_txcheck.data_dir, [*by_producer, *forgotten])
        return sorted((e["transaction_id"], e["check_count"], e["answer"]) for e in events)

    async def exported() -> bool:
        return answers() == sorted(expected)

    # the events are written out every second, and this cluster runs on
    await eventually(exported, "exactly the check-backs' events exported", 10, context=lambda: f"{answers()}")


@pytest.mark.timeout(180)  # 73 s with the CPU at a quarter (a cgroup quota of half a core of two): twice that
async def test_open_transactions_survive_kill_9_of_beat_worker_and_broker_and_end_exactly_once(
    tmp_path: Path, producer: tuple[Producer, ServedApp]
) -> None:
    receiver, served = producer
    receiver.unsure, receiver.delay = True, 0.2
    async with local_cluster_with_txcheck(tmp_path / "data") as (cluster, client):
        shop = Shop(client)
        await shop.register(receiver, served)
        transactions = [await shop.begin(f"{'commit' if n % 2 else 'rollback'} {n}") for n in range(24)]
        await eventually(lambda: _at_least(receiver.checks, 12), "checks under way", 20)

        await cluster.kill("txcheck-beat")
        await cluster.kill("txcheck-worker")  # with checks in flight: unacknowledged, given back after the timeout
        await cluster.restart("txcheck-worker")
        await cluster.restart("txcheck-beat")
        await eventually(lambda: _at_least(receiver.checks, 36), "checks again after the restarts", 30)
        await cluster.kill_and_restart("broker-a", client, "orders")
        receiver.unsure = False

        found = await all_ended(client, transactions, cluster, timeout=45)
        ids = await shop.delivered()

    committed = [message_id(t) for t in transactions if found[t] == "COMMITTED"]
    rolled_back = [message_id(t) for t in transactions if found[t] == "ROLLED_BACK"]
    assert len(committed) == len(rolled_back) == 12
    assert all(found[t] == ("COMMITTED" if n % 2 else "ROLLED_BACK") for n, t in enumerate(transactions))
    assert sorted(ids) == sorted(committed), "a committed message is missing or doubled, or a rolled-back one appeared"


async def _at_least(checks: list[dict[str, Any]], count: int) -> bool:
    return len(checks) >= count
