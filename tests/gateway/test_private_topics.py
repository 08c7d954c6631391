"""What the system topics keep private stays private (issue 10, item 5).

The public pull, key query and get-by-id read user topics only: dead letters are
read through `/v1/groups/{group}/dlq`, retries by the group's receives, scheduled
messages not at all until they are due, half messages through `/v1/transactions`.
A retry is received whatever filter the group uses now (seed 002: SUB_ALL).
"""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest

from tests.support.gateway_calls import nack, problem_type, received, send


async def refused(gateway: httpx.AsyncClient, topic: str) -> list[httpx.Response]:
    """The public pull and key query of `topic`: both must be refused."""
    name = quote(topic, safe="")
    pulled = await gateway.get(f"/v1/topics/{name}/queues/0/messages")
    by_key = await gateway.get(f"/v1/topics/{name}/messages", params={"key": "k1"})
    for answer in (pulled, by_key):
        assert (answer.status_code, problem_type(answer)) == (400, "reserved-topic-name"), answer.text
    return [pulled, by_key]


async def fail(gateway: httpx.AsyncClient, group: str, attempts: int) -> None:
    """Receive and nack the one message of `orders` `attempts` times, each retry due at once."""
    for attempt in range(1, attempts + 1):
        (message,) = await received(gateway, group, "orders")
        assert message["delivery_attempt"] == attempt
        await nack(gateway, group, [message["receipt_handle"]], delay_ms=0)


async def test_dead_letters_are_read_through_the_dlq_only(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers", json={"max_retries": 0})
    sent = (await send(gateway, "orders", {"body": "poison", "keys": ["k1"]})).json()
    await fail(gateway, "workers", 1)

    for answer in await refused(gateway, "%DLQ%workers"):
        assert "GET /v1/groups/workers/dlq" in answer.json()["detail"]
        assert "poison" not in answer.text
    (dead,) = (await gateway.get("/v1/groups/workers/dlq")).json()["messages"]
    assert (dead["message_id"], dead["body"]) == (sent["message_id"], "poison")


async def test_get_by_id_of_a_dead_lettered_message_answers_the_original(gateway: httpx.AsyncClient) -> None:
    # 40 retries leave more copies of the message (retries, then its dead letter) than one
    # index query answers: get-by-id still finds the original behind them.
    await gateway.put("/v1/groups/workers", json={"max_retries": 40})
    sent = (await send(gateway, "orders", {"body": "poison"})).json()
    await fail(gateway, "workers", 41)

    found = await gateway.get(f"/v1/messages/{sent['message_id']}")

    assert found.status_code == 200, found.text
    original = found.json()
    assert (original["topic"], original["queue_offset"]) == ("orders", sent["queue_offset"])
    assert original["reconsume_times"] == 0


async def test_retry_queues_are_read_by_the_groups_receives_only(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    sent = (await send(gateway, "orders", {"body": "again", "keys": ["k1"]})).json()
    await fail(gateway, "workers", 1)

    for answer in await refused(gateway, "%RETRY%workers"):
        assert "group 'workers' receives them" in answer.json()["detail"]
    assert (await gateway.get(f"/v1/messages/{sent['message_id']}")).json()["topic"] == "orders"
    (retried,) = await received(gateway, "workers", "orders")
    assert (retried["message_id"], retried["delivery_attempt"]) == (sent["message_id"], 2)


@pytest.mark.parametrize(
    ("fields", "topic"), [({"delay_level": 4}, "SCHEDULE_TOPIC_XXXX"), ({"delay_ms": 60_000}, "rmq_sys_wheel_timer")]
)
async def test_a_scheduled_message_is_invisible_until_it_is_due(
    gateway: httpx.AsyncClient, fields: dict[str, int], topic: str
) -> None:
    sent = (await send(gateway, "later", {"body": "not yet", "keys": ["k1"], **fields})).json()

    by_id = await gateway.get(f"/v1/messages/{sent['message_id']}")
    assert (by_id.status_code, problem_type(by_id)) == (404, "message-not-found"), by_id.text
    assert "a scheduled message is found once it is due" in by_id.json()["detail"]
    for answer in await refused(gateway, topic):
        assert "visible in its own topic once it is due" in answer.json()["detail"]
    assert (await gateway.get("/v1/topics/later/messages", params={"key": "k1"})).json()["messages"] == []


async def test_a_retry_is_received_after_the_group_changes_its_filter(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    sent = (await send(gateway, "orders", {"body": "tagged A", "tag": "A"})).json()
    (first,) = await received(gateway, "workers", "orders", filter={"type": "TAG", "expression": "A"})
    await nack(gateway, "workers", [first["receipt_handle"]], delay_ms=0)

    retried = await received(gateway, "workers", "orders", filter={"type": "TAG", "expression": "B"})

    assert [(m["message_id"], m["delivery_attempt"], m["topic"]) for m in retried] == [
        (sent["message_id"], 2, "orders")
    ]
