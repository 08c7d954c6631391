"""Consumer groups through the gateway on real processes: retries via the timer, DLQ, redrive, crashes."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cluster import FAST_RETRY_LEVELS, LocalCluster, local_cluster
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e


async def send(client: httpx.AsyncClient, topic: str, *bodies: str) -> list[str]:
    answer = await client.post(f"/v1/topics/{topic}/messages:batch", json={"messages": [{"body": b} for b in bodies]})
    assert answer.status_code == 200, answer.text
    return [entry["result"]["message_id"] for entry in answer.json()["results"]]


async def receive(client: httpx.AsyncClient, group: str, topic: str, **body: Any) -> list[dict[str, Any]]:
    answer = await client.post(f"/v1/groups/{group}/topics/{topic}/receive", json={"max_messages": 32} | body)
    assert answer.status_code == 200, answer.text
    messages: list[dict[str, Any]] = answer.json()["messages"]
    return messages


async def settle(client: httpx.AsyncClient, verb: str, group: str, handles: list[str], **extra: Any) -> None:
    answer = await client.post(f"/v1/groups/{group}/{verb}", json={"receipt_handles": handles} | extra)
    assert answer.status_code == 200, answer.text
    assert all(r["ok"] for r in answer.json()["results"]), answer.text


async def test_a_failing_message_retries_with_backoff_then_dead_letters_and_is_redriven(
    core_gateway: httpx.AsyncClient, unique: Callable[[str], str]
) -> None:
    client, group, topic = core_gateway, unique("billing"), unique("orders")
    assert (await client.put(f"/v1/groups/{group}", json={"max_retries": 2})).status_code == 201
    (message_id,) = await send(client, topic, "poison")

    attempts = []
    for _ in range(3):
        (message,) = await receive(client, group, topic, wait_seconds=5)
        assert message["message_id"] == message_id
        attempts.append(message["delivery_attempt"])
        await settle(client, "nack", group, [message["receipt_handle"]], reason="cannot parse")
    assert attempts == [1, 2, 3]
    assert await receive(client, group, topic, wait_seconds=1) == []

    dlq = (await client.get(f"/v1/groups/{group}/dlq")).json()["messages"]
    assert [(d["message_id"], d["attempts"], d["original_topic"]) for d in dlq] == [(message_id, 3, topic)]
    assert "cannot parse" in dlq[0]["reason"]

    redriven = (await client.post(f"/v1/groups/{group}/dlq:redrive", json={})).json()
    assert redriven["message_ids"] == [message_id]
    (back,) = await receive(client, group, topic, wait_seconds=5)
    assert (back["message_id"], back["delivery_attempt"]) == (message_id, 1)
    await settle(client, "ack", group, [back["receipt_handle"]])


async def test_a_consumer_that_disappears_gets_its_messages_handed_on_after_the_lease(
    core_gateway: httpx.AsyncClient, unique: Callable[[str], str]
) -> None:
    client, group, topic = core_gateway, unique("shipping"), unique("parcels")
    await client.put(f"/v1/groups/{group}", json={})
    sent = set(await send(client, topic, "a", "b", "c"))
    first = await receive(client, group, topic, invisible_seconds=1)
    assert {m["message_id"] for m in first} == sent
    # ... the consumer is gone; after 1 s plus the first backoff, another one gets them.
    again: list[dict[str, Any]] = []
    for _ in range(20):
        again += await receive(client, group, topic, wait_seconds=1)
        if len(again) == len(sent):
            break
    assert {m["message_id"] for m in again} == sent
    assert {m["delivery_attempt"] for m in again} == {2}
    await settle(client, "ack", group, [m["receipt_handle"] for m in again])


async def test_broker_kill_9_mid_lease_loses_nothing(tmp_path: Path) -> None:
    env = FAST_RETRY_LEVELS | {
        "PETREL_BROKER_FLUSH_MODE": "SYNC_FLUSH",
        "PETREL_BROKER_OFFSET_PERSIST_INTERVAL_SECONDS": "0.2",
    }
    async with local_cluster(tmp_path / "data", **env) as (cluster, client):
        await client.put("/v1/topics/orders", json={"queues": 4})
        await client.put("/v1/groups/billing", json={})
        sent = await send(client, "orders", *[f"m{i}" for i in range(60)])
        leased = await receive(client, "billing", "orders", invisible_seconds=60)
        acked = leased[:10]
        await settle(client, "ack", "billing", [m["receipt_handle"] for m in acked])

        async def acks_persisted() -> bool:
            return persisted_offsets(cluster, "billing", "orders") > 0

        await eventually(acks_persisted, "the acks' consume offsets persisted by broker-a", timeout=5)

        await cluster.kill_and_restart("broker-a", client, "orders")

        seen: dict[str, int] = {}
        for _ in range(20):
            batch = await receive(client, "billing", "orders", wait_seconds=1)
            if not batch:
                break
            for m in batch:
                seen[m["message_id"]] = seen.get(m["message_id"], 0) + 1
            await settle(client, "ack", "billing", [m["receipt_handle"] for m in batch])
        unacked = set(sent) - {m["message_id"] for m in acked}
        assert unacked <= seen.keys(), f"{len(unacked - seen.keys())} messages never came back after kill -9"
        stale = await client.post("/v1/groups/billing/ack", json={"receipt_handles": [leased[-1]["receipt_handle"]]})
        assert stale.json()["results"][0]["error"]["status"] == 409


def persisted_offsets(cluster: LocalCluster, group: str, topic: str) -> int:
    """The sum of the group's consume offsets on the topic, as broker-a's metadata database holds them."""
    path = cluster.data_dir / "brokers" / "broker-a" / "metadata.db"
    if not path.exists():
        return 0
    with contextlib.closing(sqlite3.connect(path)) as db:
        query = 'SELECT COALESCE(SUM("offset"), 0) FROM consumer_offsets WHERE "group" = ? AND topic = ?'
        (total,) = db.execute(query, (group, topic)).fetchone()
    return int(total)
