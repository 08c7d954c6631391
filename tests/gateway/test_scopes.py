"""Keys no wider than their grants where the resource is not in the path (issue 25, findings 8 and 9).

A group's dead letters are of many topics; a message, a schedule and a transaction are
found by an id. A key answers for the topics it holds: what it may not read is left out
of listings, refused in a redrive like a missing id, and answered 404 exactly as an id
that is not there, before anything that tells the resource's state. An Idempotency-Key
is the API key's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from libs.message import MessageIdFactory
from tests.support.api_keys import bearer, issue_key, make_key
from tests.support.gateway_calls import nack, received, send_many
from tests.support.gateway_transactions import begin, end

pytestmark = pytest.mark.asyncio


@pytest.fixture
def admin_key(tmp_path: Path) -> str:
    return issue_key(tmp_path, "admin", "pub", "sub", name="root")


@pytest.fixture
def gateway_overrides(tmp_path: Path, admin_key: str) -> dict[str, Any]:
    return {"auth": "required", "data_dir": tmp_path}


@pytest.fixture
def admin(gateway: httpx.AsyncClient, admin_key: str) -> httpx.AsyncClient:
    """The gateway, called with the admin key unless a call gives another."""
    gateway.headers.update(bearer(admin_key))
    return gateway


def random_id() -> str:
    return MessageIdFactory().new_id()


def assert_answered_as_missing(
    hidden: httpx.Response, hidden_id: str, missing: httpx.Response, missing_id: str
) -> None:
    """The answer about a resource the key may not see is the answer about one that is not there, byte for byte
    (but for the id asked about, which the path names)."""
    assert hidden.status_code == 404, hidden.text
    assert hidden.headers["content-type"] == missing.headers["content-type"] == "application/problem+json"
    assert hidden.content.replace(hidden_id.encode(), b"ID") == missing.content.replace(missing_id.encode(), b"ID")
    assert b"payroll" not in hidden.content


# ---- a group's dead letters (finding 8) ---------------------------------------------------------


async def dead_letters_of_two_topics(admin: httpx.AsyncClient) -> tuple[str, str]:
    """Group billing's DLQ holds a dead letter of orders and one of payroll: their ids."""
    assert (await admin.put("/v1/groups/billing", json={"max_retries": 0})).status_code == 201
    ids = []
    for topic in ("orders", "payroll"):
        (message_id,) = await send_many(admin, topic, 1)
        (leased,) = await received(admin, "billing", topic, wait_seconds=5)
        await nack(admin, "billing", [leased["receipt_handle"]])
        ids.append(message_id)
    return ids[0], ids[1]


async def peeked(gateway: httpx.AsyncClient, headers: dict[str, str] | None = None) -> list[tuple[str, str]]:
    answer = await gateway.get("/v1/groups/billing/dlq", headers=headers)
    assert answer.status_code == 200, answer.text
    return sorted((m["original_topic"], m["message_id"]) for m in answer.json()["messages"])


async def test_a_dlq_peek_shows_only_dead_letters_of_topics_the_key_may_read(
    admin: httpx.AsyncClient, admin_key: str
) -> None:
    orders, payroll = await dead_letters_of_two_topics(admin)
    assert await peeked(admin) == [("orders", orders), ("payroll", payroll)]

    group_only = await make_key(admin, admin_key, "sub:group/billing")
    assert await peeked(admin, group_only) == [], "a key holding only the group read other topics' dead letters"
    orders_reader = await make_key(admin, admin_key, "sub:group/billing", "sub:topic/orders")
    assert await peeked(admin, orders_reader) == [("orders", orders)]
    group_admin = await make_key(admin, admin_key, "admin:group/billing", "admin:topic/payroll")
    refused = await admin.get("/v1/groups/billing/dlq", headers=group_admin)
    assert (refused.status_code, refused.json()["required"]) == (403, ["sub"]), "admin on a topic read its bodies"


async def test_a_redrive_sends_back_only_dead_letters_of_topics_the_key_may_use(
    admin: httpx.AsyncClient, admin_key: str
) -> None:
    orders, payroll = await dead_letters_of_two_topics(admin)
    operator = await make_key(admin, admin_key, "admin:group/billing", "sub:topic/orders")
    unknown = random_id()

    by_id = await admin.post(
        "/v1/groups/billing/dlq:redrive", json={"message_ids": [payroll, unknown]}, headers=operator
    )
    assert by_id.status_code == 200, by_id.text
    assert (by_id.json()["redriven"], by_id.json()["not_found"]) == (0, [payroll, unknown]), (
        "a dead letter of a topic the key may not use was redriven, or answered otherwise than a missing one"
    )

    everything = await admin.post("/v1/groups/billing/dlq:redrive", json={}, headers=operator)
    assert everything.status_code == 200, everything.text
    assert (everything.json()["message_ids"], everything.json()["remaining"]) == ([orders], 0)
    assert await peeked(admin) == [("payroll", payroll)], "the payroll dead letter left the DLQ"
    back = await received(admin, "billing", "orders", wait_seconds=5)
    assert [m["message_id"] for m in back] == [orders]

    assert (await admin.post("/v1/groups/billing/dlq:redrive", json={})).json()["message_ids"] == [payroll]


async def test_an_offset_reset_needs_the_topic_too(admin: httpx.AsyncClient, admin_key: str) -> None:
    await admin.put("/v1/groups/billing", json={})
    await send_many(admin, "payroll", 1)
    await send_many(admin, "orders", 1)
    group_admin = await make_key(admin, admin_key, "admin:group/billing", "sub:topic/orders")

    refused = await admin.post(
        "/v1/groups/billing/topics/payroll/offsets:reset", json={"offset": 0}, headers=group_admin
    )
    assert refused.status_code == 403, refused.text
    assert refused.json()["required"] == ["sub:topic/payroll", "admin:topic/payroll"]
    allowed = await admin.post(
        "/v1/groups/billing/topics/orders/offsets:reset", json={"offset": 0}, headers=group_admin
    )
    assert allowed.status_code == 200, allowed.text


async def test_a_topics_queue_offsets_are_shown_to_keys_that_may_read_it(
    admin: httpx.AsyncClient, admin_key: str
) -> None:
    await admin.put("/v1/topics/orders", json={"queues": 1})
    await send_many(admin, "orders", 3)
    reader = await make_key(admin, admin_key, "sub:topic/orders")
    publisher = await make_key(admin, admin_key, "pub:topic/orders")

    def queues(answer: httpx.Response) -> list[dict[str, Any]]:
        assert answer.status_code == 200, answer.text
        return [q for broker in answer.json()["brokers"] for q in broker["queues"]]

    read = queues(await admin.get("/v1/topics/orders", headers=reader))
    assert sum(q["max_offset"] - q["min_offset"] for q in read) == 3
    published = queues(await admin.get("/v1/topics/orders", headers=publisher))
    assert published
    assert all("min_offset" not in q and "max_offset" not in q for q in published)


# ---- resources found by an id (finding 9) -------------------------------------------------------


async def test_a_message_of_a_topic_the_key_may_not_read_is_answered_as_missing(
    admin: httpx.AsyncClient, admin_key: str
) -> None:
    (message_id,) = await send_many(admin, "payroll", 1)
    reader = await make_key(admin, admin_key, "sub:topic/orders")
    unknown = random_id()

    hidden = await admin.get(f"/v1/messages/{message_id}", headers=reader)
    missing = await admin.get(f"/v1/messages/{unknown}", headers=reader)
    assert_answered_as_missing(hidden, message_id, missing, unknown)
    assert (await admin.get(f"/v1/messages/{message_id}")).status_code == 200


async def test_a_schedule_of_a_topic_the_key_may_not_use_is_answered_as_missing(
    admin: httpx.AsyncClient, admin_key: str
) -> None:
    (delivered,) = await send_many(admin, "payroll", 1)
    (scheduled,) = await send_many(admin, "payroll", 1, delay_ms=3_600_000)
    producer = await make_key(admin, admin_key, "pub:topic/orders")
    unknown = random_id()

    missing = await admin.delete(f"/v1/messages/{unknown}/schedule", headers=producer)
    for message_id in (delivered, scheduled):
        hidden = await admin.delete(f"/v1/messages/{message_id}/schedule", headers=producer)
        assert_answered_as_missing(hidden, message_id, missing, unknown)
    already = await admin.delete(f"/v1/messages/{delivered}/schedule")
    assert already.status_code == 409, "a key that may use the topic learns the message's state"


async def test_a_transaction_of_a_topic_the_key_may_not_use_is_answered_as_missing(
    admin: httpx.AsyncClient, admin_key: str
) -> None:
    transaction_id = (await begin(admin, "payroll"))["transaction_id"]
    broker = transaction_id.split(":")[0]
    unknown = f"{broker}:{random_id()}"
    producer = await make_key(admin, admin_key, "pub:topic/orders")

    for verb in ("commit", "rollback"):
        path = f"/v1/transactions/{{}}/{verb}"
        hidden = await admin.post(path.format(transaction_id), headers=producer)
        missing = await admin.post(path.format(unknown), headers=producer)
        assert_answered_as_missing(hidden, transaction_id, missing, unknown)
    hidden = await admin.get(f"/v1/transactions/{transaction_id}", headers=producer)
    missing = await admin.get(f"/v1/transactions/{unknown}", headers=producer)
    assert_answered_as_missing(hidden, transaction_id, missing, unknown)

    assert (await admin.get(f"/v1/transactions/{transaction_id}")).json()["state"] == "OPEN"
    assert (await end(admin, transaction_id, "commit")).status_code == 200


# ---- Idempotency-Keys (finding 9) ---------------------------------------------------------------


async def test_another_producers_idempotency_key_is_its_own(admin: httpx.AsyncClient, admin_key: str) -> None:
    first, second = [await make_key(admin, admin_key, "pub:topic/orders") for _ in range(2)]

    async def send(producer: dict[str, str]) -> str:
        headers = producer | {"idempotency-key": "checkout-7"}
        answer = await admin.post("/v1/topics/orders/messages", json={"body": "order 7"}, headers=headers)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["message_id"])

    mine = await send(first)
    theirs = await send(second)
    assert theirs != mine, "another producer's send with the same Idempotency-Key got the first one's answer"
    assert await send(first) == mine
    assert await send(second) == theirs
