"""`/v1/groups/{group}`: receive under a lease, ack, nack, visibility; FIFO and broadcast groups."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import httpx
import pytest

from libs import jsonutil
from libs.receipt import ReceiptHandle, ReceiptKey
from tests.support.gateway_calls import (
    ack,
    long_polls_waiting,
    nack,
    problem_type,
    receive,
    received,
    register_silent_broker,
    send_many,
)
from tests.support.serving import ServedApp
from tests.support.waiting import eventually

TEXT = {"body": "order 1 paid", "tag": "paid", "keys": ["order-1"], "properties": {"amount": "42"}}


def errors(answer: httpx.Response) -> list[str | None]:
    return [r["error"]["type"].rsplit("/", 1)[-1] if r["error"] else None for r in answer.json()["results"]]


def forged(broker: str) -> str:
    """A handle in Petrel's form, naming `broker`, signed with a key no broker has."""
    return ReceiptHandle(broker, "workers", "", "orders", 0, 0, 1, 1, 2**41).encode(ReceiptKey(b"not the broker's key"))


async def test_send_receive_ack(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    sent = (await gateway.post("/v1/topics/orders/messages", json=TEXT)).json()

    (message,) = await received(gateway, "workers", "orders", invisible_seconds=60)
    assert message["message_id"] == sent["message_id"]
    assert (message["topic"], message["broker"]) == ("orders", sent["broker"])
    assert (message["queue_id"], message["queue_offset"]) == (sent["queue_id"], sent["queue_offset"])
    assert (message["body"], message["tag"], message["keys"]) == ("order 1 paid", "paid", ["order-1"])
    assert message["properties"] == {"amount": "42"}
    assert message["delivery_attempt"] == 1
    now = time.time() * 1000
    assert now + 50_000 < message["invisible_until"] <= now + 61_000
    assert await received(gateway, "workers", "orders") == [], "a leased message was delivered twice"

    answer = await ack(gateway, "workers", [message["receipt_handle"]])
    assert answer.json()["results"] == [{"receipt_handle": message["receipt_handle"], "ok": True, "error": None}]
    assert errors(await ack(gateway, "workers", [message["receipt_handle"]])) == ["already-acked"]


async def test_binary_bodies_are_received_as_base64(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    raw = bytes(range(256))
    await gateway.post("/v1/topics/blobs/messages", json={"body_base64": base64.b64encode(raw).decode()})

    (message,) = await received(gateway, "workers", "blobs")
    assert message["body"] is None
    assert base64.b64decode(message["body_base64"]) == raw


async def test_a_receive_gathers_from_every_broker(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    sent = await send_many(gateway, "orders", 12)

    messages = await received(gateway, "workers", "orders", max_messages=32)
    assert sorted(m["message_id"] for m in messages) == sorted(sent)
    assert {m["broker"] for m in messages} == {"broker-a", "broker-b"}
    assert len(await received(gateway, "workers", "orders", max_messages=5)) == 0

    results = (await ack(gateway, "workers", [m["receipt_handle"] for m in messages])).json()["results"]
    assert [r["receipt_handle"] for r in results] == [m["receipt_handle"] for m in messages]
    assert all(r["ok"] for r in results), results


async def test_max_messages_is_a_limit(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    await send_many(gateway, "orders", 5)
    assert len(await received(gateway, "workers", "orders", max_messages=3)) == 3
    assert len(await received(gateway, "workers", "orders", max_messages=3)) == 2


async def test_a_filter_receives_only_what_matches(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    for tag in ("paid", "refunded", "paid"):
        await gateway.post("/v1/topics/orders/messages", json={"body": tag, "tag": tag})

    tagged = await received(gateway, "workers", "orders", filter={"type": "TAG", "expression": "refunded"})
    assert [m["body"] for m in tagged] == ["refunded"]


async def test_nack_with_no_delay_comes_back_as_the_second_attempt(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    (message_id,) = await send_many(gateway, "orders", 1)
    (first,) = await received(gateway, "workers", "orders")

    answer = await nack(gateway, "workers", [first["receipt_handle"]], delay_ms=0, reason="try again")
    assert answer.json()["results"][0]["ok"], answer.text

    (second,) = await received(gateway, "workers", "orders", wait_seconds=5)
    assert (second["message_id"], second["topic"]) == (message_id, "orders")
    assert second["delivery_attempt"] == 2
    assert second["receipt_handle"] != first["receipt_handle"]
    assert errors(await ack(gateway, "workers", [first["receipt_handle"]])) != [None], "a spent lease acked"
    assert errors(await ack(gateway, "workers", [second["receipt_handle"]])) == [None]


async def test_visibility_extends_a_lease_with_a_new_handle(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    await send_many(gateway, "orders", 1)
    (message,) = await received(gateway, "workers", "orders", invisible_seconds=5)

    changed = await gateway.post(
        "/v1/groups/workers/visibility",
        json={"receipt_handle": message["receipt_handle"], "invisible_seconds": 600},
    )
    assert changed.status_code == 200, changed.text
    extended = changed.json()
    assert extended["invisible_until"] > message["invisible_until"] + 500_000
    assert extended["receipt_handle"] != message["receipt_handle"]

    assert errors(await ack(gateway, "workers", [message["receipt_handle"]])) == ["lease-superseded"]
    assert errors(await ack(gateway, "workers", [extended["receipt_handle"]])) == [None]


async def test_visibility_zero_ends_the_lease_now(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    await send_many(gateway, "orders", 1)
    (message,) = await received(gateway, "workers", "orders", invisible_seconds=600)

    changed = await gateway.post(
        "/v1/groups/workers/visibility", json={"receipt_handle": message["receipt_handle"], "invisible_seconds": 0}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["invisible_until"] <= time.time() * 1000 + 1000
    # Given back now: a failed attempt, delivered again at once (no backoff); the old lease acks nothing.
    assert errors(await ack(gateway, "workers", [changed.json()["receipt_handle"]])) == ["lease-ended"]
    (again,) = await received(gateway, "workers", "orders", wait_seconds=5)
    assert (again["message_id"], again["delivery_attempt"]) == (message["message_id"], 2)


async def test_long_polling_answers_when_a_message_arrives_on_any_broker(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    await gateway.put("/v1/topics/waiting")

    async def received_after_send() -> tuple[list[dict[str, Any]], float]:
        started = time.monotonic()
        messages = await received(gateway, "workers", "waiting", wait_seconds=10)
        return messages, time.monotonic() - started

    waiting = asyncio.create_task(received_after_send())
    await eventually(lambda: _a_poll_waiting(gateway), "the receive waits in the gateway")
    assert not waiting.done(), "an empty receive with wait_seconds answered before anything arrived"
    (message_id,) = await send_many(gateway, "waiting", 1)
    messages, elapsed = await asyncio.wait_for(waiting, 5)
    assert [m["message_id"] for m in messages] == [message_id]
    assert elapsed < 5


async def test_an_empty_long_poll_ends_after_its_wait(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    await gateway.put("/v1/topics/quiet")
    started = time.monotonic()
    assert await received(gateway, "workers", "quiet", wait_seconds=0.3) == []
    assert 0.25 < time.monotonic() - started < 3


async def test_a_fifo_group_delivers_a_message_group_in_order_one_at_a_time(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/ordered", json={"fifo": True})
    sent = await send_many(gateway, "orders", 3, message_group="order-7")

    delivered = []
    for _ in sent:
        batch = await received(gateway, "ordered", "orders", max_messages=32)
        assert len(batch) == 1, f"FIFO delivered {len(batch)} of one message group at once"
        assert await received(gateway, "ordered", "orders") == [], "the next one came while the first was leased"
        delivered.append(batch[0]["message_id"])
        await ack(gateway, "ordered", [batch[0]["receipt_handle"]])
    assert delivered == sent


async def test_a_broadcast_group_gives_every_client_every_message(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/fanout", json={"broadcast": True})
    sent = await send_many(gateway, "orders", 3)

    for client_id in ("client-1", "client-2"):
        messages = await received(gateway, "fanout", "orders", max_messages=32, client_id=client_id)
        assert sorted(m["message_id"] for m in messages) == sorted(sent), client_id
        await ack(gateway, "fanout", [m["receipt_handle"] for m in messages])

    anonymous = await receive(gateway, "fanout", "orders")
    assert anonymous.status_code == 400, anonymous.text


@pytest.mark.parametrize(
    "body",
    [
        {"max_messages": 0},
        {"max_messages": 33},
        {"wait_seconds": -1},
        {"wait_seconds": 31},
        {"invisible_seconds": 0},
        {"invisible_seconds": 43_201},
        {"filter": {"type": "XPATH", "expression": "x"}},
        {"filter": {"type": "TAG", "expression": ""}},
        {"client_id": "has space"},
        {"colour": "red"},
    ],
)
async def test_bad_receives_are_422(gateway: httpx.AsyncClient, body: dict[str, Any]) -> None:
    await gateway.put("/v1/groups/workers")
    answer = await receive(gateway, "workers", "orders", **body)
    assert answer.status_code == 422, answer.text
    assert problem_type(answer) == "validation-failed"


async def test_receive_names_what_is_missing_or_invalid(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/orders")
    await gateway.put("/v1/groups/workers")

    unknown_group = await receive(gateway, "nobody", "orders")
    assert (unknown_group.status_code, problem_type(unknown_group)) == (404, "group-not-found")
    unknown_topic = await receive(gateway, "workers", "nothing")
    assert (unknown_topic.status_code, problem_type(unknown_topic)) == (404, "topic-not-found")
    bad_group = await receive(gateway, "bad%20group", "orders")
    assert (bad_group.status_code, problem_type(bad_group)) == (400, "invalid-request")
    bad_topic = await receive(gateway, "workers", "%25RETRY%25workers")
    assert (bad_topic.status_code, problem_type(bad_topic)) == (400, "invalid-topic-name")
    bad_filter = await receive(gateway, "workers", "orders", filter={"type": "SQL92", "expression": "a >"})
    assert (bad_filter.status_code, problem_type(bad_filter)) == (400, "invalid-filter")
    malformed = await gateway.post(
        "/v1/groups/workers/topics/orders/receive", content=b"{", headers={"content-type": "application/json"}
    )
    assert (malformed.status_code, problem_type(malformed)) == (400, "malformed-body")


async def test_bad_handles_fail_per_entry_and_the_good_ones_still_ack(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    await send_many(gateway, "orders", 1)
    (message,) = await received(gateway, "workers", "orders")
    handles = ["garbage", forged("broker-z"), message["receipt_handle"], forged("broker-a"), ""]

    answer = await ack(gateway, "workers", handles)
    results = answer.json()["results"]
    assert [r["receipt_handle"] for r in results] == handles
    assert errors(answer) == [
        "invalid-receipt-handle",
        "invalid-receipt-handle",
        None,
        "invalid-receipt-handle",
        "invalid-receipt-handle",
    ]
    assert "names broker broker-z, which is not registered" in results[1]["error"]["detail"]
    assert all(r["error"]["status"] == 400 for r in results if r["error"])


async def test_a_tampered_handle_is_refused(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    await send_many(gateway, "orders", 1)
    (message,) = await received(gateway, "workers", "orders")
    payload, signature = message["receipt_handle"].split(".")
    fields = jsonutil.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    fields[-1] += 3_600_000  # a longer lease than was given
    tampered = base64.urlsafe_b64encode(jsonutil.dumps(fields)).rstrip(b"=").decode() + "." + signature

    assert errors(await ack(gateway, "workers", [tampered])) == ["invalid-receipt-handle"]
    assert errors(await ack(gateway, "workers", [message["receipt_handle"]])) == [None]


async def test_a_handle_of_another_group_is_foreign(gateway: httpx.AsyncClient) -> None:
    for group in ("workers", "auditors"):
        await gateway.put(f"/v1/groups/{group}")
    await send_many(gateway, "orders", 1)
    (message,) = await received(gateway, "workers", "orders")

    assert errors(await ack(gateway, "auditors", [message["receipt_handle"]])) == ["foreign-receipt-handle"]
    assert errors(await nack(gateway, "auditors", [message["receipt_handle"]])) == ["foreign-receipt-handle"]


async def test_an_unknown_group_fails_each_ack(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    await send_many(gateway, "orders", 1)
    (message,) = await received(gateway, "workers", "orders")
    assert errors(await ack(gateway, "nobody", [message["receipt_handle"]])) != [None]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("ack", {"receipt_handles": []}),
        ("ack", {"receipt_handles": ["h"] * 257}),
        ("ack", {"handles": ["h"]}),
        ("nack", {"receipt_handles": ["h"], "delay_ms": 10, "delay_level": 3}),
        ("nack", {"receipt_handles": ["h"], "delay_ms": -1}),
        ("nack", {"receipt_handles": ["h"], "delay_level": 0}),
        ("nack", {"receipt_handles": ["h"], "reason": "x" * 1025}),
        ("visibility", {"receipt_handle": "h"}),
        ("visibility", {"receipt_handle": "h", "invisible_seconds": 43_201}),
        ("visibility", {"receipt_handle": "h", "invisible_seconds": -1}),
    ],
)
async def test_bad_settle_bodies_are_422(gateway: httpx.AsyncClient, path: str, body: dict[str, Any]) -> None:
    answer = await gateway.post(f"/v1/groups/workers/{path}", json=body)
    assert answer.status_code == 422, answer.text
    assert problem_type(answer) == "validation-failed"


async def test_a_nack_delay_level_past_the_last_is_400(gateway: httpx.AsyncClient) -> None:
    answer = await gateway.post("/v1/groups/workers/nack", json={"receipt_handles": ["h"], "delay_level": 19})
    assert (answer.status_code, problem_type(answer)) == (400, "invalid-request")


async def test_visibility_of_a_bad_handle_is_a_problem(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/groups/workers")
    for handle in ("garbage", forged("broker-z"), forged("broker-a")):
        answer = await gateway.post(
            "/v1/groups/workers/visibility", json={"receipt_handle": handle, "invisible_seconds": 30}
        )
        assert (answer.status_code, problem_type(answer)) == (400, "invalid-receipt-handle"), handle


async def test_a_silent_broker_does_not_stop_receive_or_ack(gateway: httpx.AsyncClient, nameserver: ServedApp) -> None:
    await gateway.put("/v1/groups/workers")
    await gateway.put("/v1/topics/orders")
    await register_silent_broker(nameserver, "orders")
    (message_id,) = await send_many(gateway, "orders", 1)

    messages = await received(gateway, "workers", "orders")
    assert [m["message_id"] for m in messages] == [message_id]

    answer = await ack(gateway, "workers", [forged("broker-c"), messages[0]["receipt_handle"]])
    assert errors(answer) == ["broker-unavailable", None]
    assert answer.json()["results"][0]["error"]["status"] == 503


async def _a_poll_waiting(gateway: httpx.AsyncClient) -> bool:
    return await long_polls_waiting(gateway) >= 1
