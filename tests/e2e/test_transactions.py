"""Transactions on real processes and the real Redis: check-backs by txcheck's Celery worker and beat, and crashes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from libs import webhooks
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


async def register(client: httpx.AsyncClient, producer: Producer, served: ServedApp) -> None:
    answer = await client.put("/v1/producer-groups/shop", json={"checkback_url": f"{served.url}/checkback"})
    assert answer.status_code == 201, answer.text
    producer.secret = answer.json()["signing_secret"]
    assert (await client.put("/v1/topics/orders", json={"queues": 2})).status_code == 201


async def begin(client: httpx.AsyncClient, body: str, **extra: Any) -> str:
    answer = await client.post("/v1/topics/orders/transactions", json={"body": body, "producer_group": "shop"} | extra)
    assert answer.status_code == 201, answer.text
    transaction_id: str = answer.json()["transaction_id"]
    return transaction_id


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


async def delivered(client: httpx.AsyncClient) -> list[str]:
    """The message ids in the topic, every queue, in order (duplicates kept)."""
    ids = []
    for queue in range(2):
        answer = await client.get(f"/v1/topics/orders/queues/{queue}/messages", params={"offset": 0, "max": 256})
        assert answer.status_code == 200, answer.text
        ids += [m["message_id"] for m in answer.json()["messages"]]
    return ids


def message_id(transaction_id: str) -> str:
    return transaction_id.split(":", 1)[1]


def check_events(data_dir: Path) -> list[dict[str, Any]]:
    lines = [
        json.loads(line)
        for path in (data_dir / "export" / "events").rglob("txcheck-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    return [e for e in lines if e["event"] == "transaction_check"]


async def test_forgotten_transactions_are_resolved_by_check_backs_and_ended_ones_are_never_asked(
    tmp_path: Path, producer: tuple[Producer, ServedApp]
) -> None:
    receiver, served = producer
    async with local_cluster_with_txcheck(tmp_path / "data") as (cluster, client):
        await register(client, receiver, served)
        by_producer = [await begin(client, f"{verb} by the producer", check_immunity_seconds=60) for verb in ("c", "r")]
        assert (await client.post(f"/v1/transactions/{by_producer[0]}/commit")).json()["outcome"] == "COMMIT"
        assert (await client.post(f"/v1/transactions/{by_producer[1]}/rollback")).json()["outcome"] == "ROLLBACK"
        forgotten = [await begin(client, body) for body in ("commit 1", "rollback 2", "unsure 3")]

        found = await all_ended(client, forgotten, cluster, timeout=20)

        assert list(found.values()) == ["COMMITTED", "ROLLED_BACK", "COMMITTED"]
        assert sorted(await delivered(client)) == sorted(
            message_id(t) for t in (by_producer[0], forgotten[0], forgotten[2])
        )
        assert [receiver.asked_about(t) for t in (*by_producer, *forgotten)] == [[], [], [1], [1], [1, 2]]
        assert receiver.refused == 0
        (first, *_) = receiver.checks
        assert (first["topic"], first["producer_group"], first["keys"], first["properties"]) == (
            "orders",
            "shop",
            [],
            {},
        )
    answers = sorted((e["transaction_id"], e["check_count"], e["answer"]) for e in check_events(tmp_path / "data"))
    assert answers == sorted(
        [
            (forgotten[0], 1, "COMMIT"),
            (forgotten[1], 1, "ROLLBACK"),
            (forgotten[2], 1, "UNKNOWN"),
            (forgotten[2], 2, "COMMIT"),
        ]
    )


async def test_open_transactions_survive_kill_9_of_beat_worker_and_broker_and_end_exactly_once(
    tmp_path: Path, producer: tuple[Producer, ServedApp]
) -> None:
    receiver, served = producer
    receiver.unsure, receiver.delay = True, 0.2
    async with local_cluster_with_txcheck(tmp_path / "data") as (cluster, client):
        await register(client, receiver, served)
        transactions = [await begin(client, f"{'commit' if n % 2 else 'rollback'} {n}") for n in range(24)]
        await eventually(lambda: _at_least(receiver.checks, 12), "checks under way", 20)

        await cluster.kill("txcheck-beat")
        await cluster.kill("txcheck-worker")  # with checks in flight: unacknowledged, given back after the timeout
        await cluster.restart("txcheck-worker")
        await cluster.restart("txcheck-beat")
        await eventually(lambda: _at_least(receiver.checks, 36), "checks again after the restarts", 30)
        await cluster.kill_and_restart("broker-a", client, "orders")
        receiver.unsure = False

        found = await all_ended(client, transactions, cluster, timeout=45)
        ids = await delivered(client)

    committed = [message_id(t) for t in transactions if found[t] == "COMMITTED"]
    rolled_back = [message_id(t) for t in transactions if found[t] == "ROLLED_BACK"]
    assert len(committed) == len(rolled_back) == 12
    assert all(found[t] == ("COMMITTED" if n % 2 else "ROLLED_BACK") for n, t in enumerate(transactions))
    assert sorted(ids) == sorted(committed), "a committed message is missing or doubled, or a rolled-back one appeared"


async def _at_least(checks: list[dict[str, Any]], count: int) -> bool:
    return len(checks) >= count
