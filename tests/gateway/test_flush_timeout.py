"""A SYNC_FLUSH put whose disk sync times out is stored: answered as such, never sent again.

Two in-process brokers under SYNC_FLUSH whose CommitLog syncs hang (tests.support.disk),
the real Redis for Idempotency-Key, the gateway in-process.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from libs.store.config import FlushMode
from services.broker.app import create_app as broker_app
from services.broker.settings import BrokerSettings
from tests.support.disk import stalled_disk
from tests.support.gateway_calls import problem_type
from tests.support.gateway_transactions import begin, end, half_copies, register, visible
from tests.support.serving import ServedApp, start_app
from tests.support.waiting import eventually

FLUSH_TIMEOUT_MS = 1000
"""Longer than the gateway's Idempotency-Key lease (300 ms): a request can outlive its lease."""


@pytest.fixture
def broker_overrides() -> dict[str, Any]:
    return {"flush_mode": FlushMode.SYNC_FLUSH, "sync_flush_timeout_ms": FLUSH_TIMEOUT_MS}


@pytest.fixture
def gateway_overrides() -> dict[str, Any]:
    return {"idempotency_lease_ms": 300}


async def send(gateway: httpx.AsyncClient, topic: str, body: str, key: str | None = None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return await gateway.post(f"/v1/topics/{topic}/messages", json={"body": body, "keys": [body]}, headers=headers)


async def copies(gateway: httpx.AsyncClient, topic: str, key: str) -> list[dict[str, Any]]:
    """Every stored message of the topic sent with `key`, on any broker."""
    answer = await gateway.get(f"/v1/topics/{topic}/messages", params={"key": key})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["messages"])


async def test_a_flush_timeout_is_answered_with_where_the_message_is_and_not_sent_again(
    gateway: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await gateway.put("/v1/topics/slow")).status_code in (200, 201)
    with stalled_disk(monkeypatch) as disk:
        answer = await send(gateway, "slow", "pay-1")
        disk.set()

    assert answer.status_code == 503, answer.text
    assert problem_type(answer) == "flush-timeout"
    problem = answer.json()
    assert "stored but not known to be durable" in problem["detail"]
    assert problem["maybe_stored"] is True
    (stored,) = await copies(gateway, "slow", "pay-1")
    assert (problem["message_id"], problem["broker"]) == (stored["message_id"], stored["broker"])
    assert (problem["queue_id"], problem["queue_offset"]) == (stored["queue_id"], stored["queue_offset"])


async def test_a_batch_answers_a_flush_timeout_per_entry_with_where_each_is(
    gateway: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await gateway.put("/v1/topics/slow")).status_code in (200, 201)
    messages = [{"body": "b", "keys": [f"batch-{i}"]} for i in range(2)]
    with stalled_disk(monkeypatch) as disk:
        answer = await gateway.post("/v1/topics/slow/messages:batch", json={"messages": messages})
        disk.set()

    assert answer.status_code == 200, answer.text
    for i, entry in enumerate(answer.json()["results"]):
        assert entry["result"] is None
        assert entry["error"]["type"].endswith("/flush-timeout")
        assert (entry["error"]["status"], entry["error"]["maybe_stored"]) == (503, True)
        (stored,) = await copies(gateway, "slow", f"batch-{i}")
        where = entry["error"]["stored"]
        assert (where["message_id"], where["broker"], where["queue_offset"]) == (
            stored["message_id"],
            stored["broker"],
            stored["queue_offset"],
        )


async def test_a_repeat_with_the_idempotency_key_after_a_flush_timeout_answers_the_stored_copy(
    gateway: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = str(uuid.uuid4())
    assert (await gateway.put("/v1/topics/slow")).status_code in (200, 201)
    with stalled_disk(monkeypatch) as disk:
        first = await send(gateway, "slow", "pay-2", key)
        disk.set()
    assert problem_type(first) == "flush-timeout"

    again = await send(gateway, "slow", "pay-2", key)
    replayed = await send(gateway, "slow", "pay-2", key)

    assert again.status_code == replayed.status_code == 201, again.text
    problem = first.json()
    for answer in (again.json(), replayed.json()):
        assert (answer["message_id"], answer["broker"], answer["queue_offset"]) == (
            problem["message_id"],
            problem["broker"],
            problem["queue_offset"],
        )
    assert len(await copies(gateway, "slow", "pay-2")) == 1


async def test_a_repeat_after_the_first_request_was_abandoned_mid_put_stores_one_copy(
    gateway: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first request hangs after the broker stored its message (as a gateway killed there would leave it).

    Once its lease is over, a repeat takes the key over: same message id, same broker, no second copy.
    """
    key = str(uuid.uuid4())
    assert (await gateway.put("/v1/topics/slow")).status_code in (200, 201)
    redis = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
    lease = f"petrel:idempotency:send:slow:{key}:lease"
    try:
        with stalled_disk(monkeypatch) as disk:
            stuck = asyncio.create_task(send(gateway, "slow", "pay-3", key))
            await eventually(lambda: _stored(gateway, "pay-3"), "the first request's message is in the CommitLog")
            await eventually(lambda: _gone(redis, lease), "the first request's lease ran out")
            takeover = await send(gateway, "slow", "pay-3", key)
            first = await stuck
            disk.set()
    finally:
        await redis.aclose()
    assert problem_type(first) == problem_type(takeover) == "flush-timeout", takeover.text
    assert takeover.json()["message_id"] == first.json()["message_id"]

    again = await send(gateway, "slow", "pay-3", key)
    assert again.status_code == 201, again.text
    assert again.json()["message_id"] == first.json()["message_id"]
    assert len(await copies(gateway, "slow", "pay-3")) == 1


async def _stored(gateway: httpx.AsyncClient, key: str) -> bool:
    return bool(await copies(gateway, "slow", key))


async def _gone(redis: aioredis.Redis, key: str) -> bool:
    return not await redis.exists(key)


async def test_a_half_message_whose_flush_timed_out_is_not_sent_again_and_can_be_ended(
    gateway: httpx.AsyncClient, brokers: dict[str, ServedApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await register(gateway)).status_code in (200, 201)
    assert (await gateway.put("/v1/topics/orders")).status_code in (200, 201)
    with stalled_disk(monkeypatch) as disk:
        answer = await gateway.post("/v1/topics/orders/transactions", json={"body": "pay", "producer_group": "shop"})
        disk.set()

    assert problem_type(answer) == "flush-timeout", answer.text
    problem = answer.json()
    halves = [h for b in brokers.values() for h in await half_copies(b)]
    assert [h.message_id for h in halves] == [problem["message_id"]], "the half message was sent again"
    (half,) = halves
    assert problem["transaction_id"] == f"{problem['broker']}:{problem['message_id']}.{half.physical_offset:x}"
    assert (await end(gateway, problem["transaction_id"], "commit")).status_code == 200
    assert await visible(gateway, "orders") == [problem["message_id"]]


async def test_a_commit_whose_op_record_timed_out_keeps_its_outcome(
    gateway: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = await begin(gateway)
    with stalled_disk(monkeypatch) as disk:
        commit = await end(gateway, sent["transaction_id"], "commit")
        disk.set()
    assert problem_type(commit) == "flush-timeout", commit.text
    assert commit.json()["outcome"] == "COMMIT"

    rollback = await end(gateway, sent["transaction_id"], "rollback")
    again = await end(gateway, sent["transaction_id"], "commit")

    assert problem_type(rollback) == "transaction-already-ended", rollback.text
    assert rollback.json()["outcome"] == "COMMIT"
    assert again.status_code == 200, again.text
    assert again.json()["first"] is False
    assert await visible(gateway, "orders") == [sent["message_id"]]


async def test_a_repeat_waits_for_the_broker_that_may_hold_the_message_and_never_goes_elsewhere(
    gateway: httpx.AsyncClient,
    brokers: dict[str, ServedApp],
    broker_configs: dict[str, BrokerSettings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = str(uuid.uuid4())
    assert (await gateway.put("/v1/topics/slow")).status_code in (200, 201)
    with stalled_disk(monkeypatch) as disk:
        first = await send(gateway, "slow", "pay-4", key)
        disk.set()
    holder = first.json()["broker"]
    brokers[holder].stop()

    repeats = [await send(gateway, "slow", "pay-4", key) for _ in range(2)]
    assert [problem_type(r) for r in repeats] == ["broker-unavailable"] * 2, repeats[-1].text

    brokers[holder] = start_app(broker_app(broker_configs[holder]), broker_configs[holder].port)
    back = await send(gateway, "slow", "pay-4", key)
    assert back.status_code == 201, back.text
    assert (back.json()["message_id"], back.json()["broker"]) == (first.json()["message_id"], holder)
    assert len(await copies(gateway, "slow", "pay-4")) == 1
