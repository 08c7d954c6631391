import asyncio
import base64
import math
import time
import uuid
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.settings import GatewaySettings
from tests.support.apps import in_process
from tests.support.gateway_calls import long_polls_waiting, problem_type, pull, register_silent_broker, send
from tests.support.serving import ServedApp
from tests.support.waiting import eventually

TEXT = {"body": "hello", "tag": "TagA", "keys": ["order-1"], "properties": {"region": "eu", "amount": "42"}}


async def test_a_sent_message_is_pulled_back_whole(gateway: httpx.AsyncClient) -> None:
    sent = await send(gateway, "orders", TEXT)

    assert sent.status_code == 201, sent.text
    result = sent.json()
    assert len(result["message_id"]) == 32
    assert result["topic"] == "orders"
    assert result["queue_offset"] == 0
    page = await pull(gateway, "orders", result["queue_id"], result["broker"])
    (message,) = page["messages"]
    assert message["message_id"] == result["message_id"]
    assert (message["body"], message["body_base64"], message["tag"]) == ("hello", None, "TagA")
    assert message["keys"] == ["order-1"]
    assert message["properties"] == {"region": "eu", "amount": "42"}
    assert message["stored_at"] >= message["born_at"]
    assert page["next_offset"] == 1


async def test_binary_bodies_come_back_as_base64(gateway: httpx.AsyncClient) -> None:
    raw = bytes(range(256))
    sent = (await send(gateway, "blobs", {"body_base64": base64.b64encode(raw).decode()})).json()

    (message,) = (await pull(gateway, "blobs", sent["queue_id"], sent["broker"]))["messages"]
    assert message["body"] is None
    assert base64.b64decode(message["body_base64"]) == raw


@pytest.mark.parametrize(
    ("message", "status", "kind"),
    [
        ({"body": "a", "body_base64": "YQ=="}, 400, "invalid-message"),
        ({}, 400, "invalid-message"),
        ({"body_base64": "not base64!"}, 400, "invalid-message"),
        ({"body": "a", "properties": {"TAGS": "x"}}, 400, "invalid-message"),
        ({"body": "a", "keys": ["has space"]}, 400, "invalid-message"),
        ({"body": "a", "tag": "A||B"}, 400, "invalid-message"),
        ({"body": "a", "properties": {f"p{i}": "x" * 12_000 for i in range(3)}}, 400, "invalid-message"),
        ({"body": "x" * (4 * 1024 * 1024 + 1)}, 413, "payload-too-large"),
        ({"body": "a", "colour": "red"}, 422, "validation-failed"),
    ],
)
async def test_bad_messages_are_refused_clearly(
    gateway: httpx.AsyncClient, message: dict[str, Any], status: int, kind: str
) -> None:
    answer = await send(gateway, "orders", message)
    assert answer.status_code == status, answer.text
    assert problem_type(answer) == kind


async def test_malformed_json_is_400(gateway: httpx.AsyncClient) -> None:
    answer = await gateway.post(
        "/v1/topics/orders/messages", content=b'{"body": "x"', headers={"content-type": "application/json"}
    )
    assert answer.status_code == 400
    assert problem_type(answer) == "malformed-body"


async def test_a_send_creates_an_unknown_topic(gateway: httpx.AsyncClient) -> None:
    assert (await gateway.get("/v1/topics/fresh")).status_code == 404
    assert (await send(gateway, "fresh", {"body": "first"})).status_code == 201
    assert (await gateway.get("/v1/topics/fresh")).json()["queues"] == 16


async def test_without_auto_create_an_unknown_topic_is_404(nameserver: ServedApp, brokers: object) -> None:
    settings = GatewaySettings(nameservers=[nameserver.address], auto_create_topics=False)
    async for client in in_process(create_app(settings)):
        answer = await send(client, "nowhere", {"body": "x"})
        assert answer.status_code == 404
        assert problem_type(answer) == "topic-not-found"


async def test_sends_spread_over_brokers_and_queues(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/spread", json={"queues": 2})
    placed = set()
    for i in range(8):
        result = (await send(gateway, "spread", {"body": str(i)})).json()
        placed.add((result["broker"], result["queue_id"]))
    assert placed == {("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)}


async def test_a_message_group_stays_on_one_queue_in_order(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/fifo", json={"queues": 4, "message_type": "FIFO"})
    results = [(await send(gateway, "fifo", {"body": str(i), "message_group": "order-7"})).json() for i in range(6)]

    assert len({(r["broker"], r["queue_id"]) for r in results}) == 1
    assert [r["queue_offset"] for r in results] == list(range(6))
    page = await pull(gateway, "fifo", results[0]["queue_id"], results[0]["broker"])
    assert [m["body"] for m in page["messages"]] == [str(i) for i in range(6)]
    assert {m["message_group"] for m in page["messages"]} == {"order-7"}


async def test_batch_answers_per_entry(gateway: httpx.AsyncClient) -> None:
    batch = {"messages": [{"body": "one"}, {"body": "two", "body_base64": "dHdv"}, {"body": "three", "tag": "T"}]}
    answer = await gateway.post("/v1/topics/orders/messages:batch", json=batch)

    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [r["index"] for r in results] == [0, 1, 2]
    assert results[0]["result"]["topic"] == "orders"
    assert results[1]["error"]["type"].endswith("/invalid-message")
    assert results[2]["result"]["message_id"] != results[0]["result"]["message_id"]


async def test_batch_limits(gateway: httpx.AsyncClient) -> None:
    too_many = {"messages": [{"body": "x"}] * 257}
    assert (await gateway.post("/v1/topics/orders/messages:batch", json=too_many)).status_code == 422
    assert (await gateway.post("/v1/topics/orders/messages:batch", json={"messages": []})).status_code == 422


async def test_filters_by_tag_and_sql(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/filtered", json={"queues": 1})
    for tag, amount in (("A", "10"), ("B", "50"), ("A", "90")):
        await send(gateway, "filtered", {"body": f"{tag}{amount}", "tag": tag, "properties": {"amount": amount}})
    bodies: dict[str, list[str]] = {}
    for label, params in (("tag", {"tag": "A"}), ("sql", {"sql": "amount > 40 AND TAGS IN ('A', 'B')"})):
        for broker in ("broker-a", "broker-b"):
            page = await pull(gateway, "filtered", 0, broker, **params)
            bodies.setdefault(label, []).extend(m["body"] for m in page["messages"])
    assert sorted(bodies["tag"]) == ["A10", "A90"]
    assert sorted(bodies["sql"]) == ["A90", "B50"]

    bad = await gateway.get("/v1/topics/filtered/queues/0/messages", params={"broker": "broker-a", "sql": "amount >"})
    assert bad.status_code == 400
    assert problem_type(bad) == "invalid-filter"
    assert bad.json()["position"] == 9


async def test_pull_errors_are_clear(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/orders", json={"queues": 2})
    ambiguous = await gateway.get("/v1/topics/orders/queues/0/messages")
    assert ambiguous.status_code == 400
    assert ambiguous.json()["brokers"] == ["broker-a", "broker-b"]
    no_queue = await gateway.get("/v1/topics/orders/queues/9/messages", params={"broker": "broker-a"})
    assert no_queue.status_code == 404
    assert problem_type(no_queue) == "queue-not-found"
    beyond = await gateway.get("/v1/topics/orders/queues/0/messages", params={"broker": "broker-a", "offset": 5})
    assert beyond.status_code == 416
    assert beyond.json()["max_offset"] == 0
    unknown = await gateway.get("/v1/topics/nothing/queues/0/messages")
    assert problem_type(unknown) == "topic-not-found"


async def test_long_poll_is_answered_when_a_message_arrives(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/waiting", json={"queues": 1})
    params: dict[str, str | int] = {"broker": "broker-a", "offset": 0, "wait_ms": 10_000}

    async def pulled_after_send() -> tuple[list[str], float]:
        started = time.monotonic()
        answer = await gateway.get("/v1/topics/waiting/queues/0/messages", params=params)
        return [m["body"] for m in answer.json()["messages"]], time.monotonic() - started

    waiting = asyncio.create_task(pulled_after_send())
    await eventually(lambda: _a_poll_waiting(gateway), "the pull waits in the gateway")
    assert not waiting.done(), "an empty pull with wait_ms answered before anything arrived"
    for _ in range(4):  # round robin: some of these land on broker-a queue 0
        await send(gateway, "waiting", {"body": "wake"})
    bodies, elapsed = await asyncio.wait_for(waiting, 5)
    assert bodies == ["wake"]
    assert elapsed < 5


async def test_empty_long_poll_ends_after_wait(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/quiet", json={"queues": 1})
    started = time.monotonic()
    page = await pull(gateway, "quiet", 0, "broker-a", wait_ms=300)
    assert page["messages"] == []
    assert 0.25 < time.monotonic() - started < 3


async def test_find_by_id_and_by_key(gateway: httpx.AsyncClient) -> None:
    sent = (await send(gateway, "orders", TEXT)).json()
    await send(gateway, "orders", {"body": "other", "keys": ["order-2"]})

    found = await gateway.get(f"/v1/messages/{sent['message_id']}")
    assert found.status_code == 200
    assert found.json()["body"] == "hello"
    by_key = (await gateway.get("/v1/topics/orders/messages", params={"key": "order-1"})).json()["messages"]
    assert [m["message_id"] for m in by_key] == [sent["message_id"]]
    window = {"key": "order-1", "begin": "2099-01-01T00:00:00Z", "end": "2099-01-02T00:00:00+01:00"}
    assert (await gateway.get("/v1/topics/orders/messages", params=window)).json()["messages"] == []
    backwards = await gateway.get("/v1/topics/orders/messages", params={"key": "k", "begin": "2099-01-01T00:00:00Z"})
    assert backwards.status_code == 400
    assert "is after end" in backwards.json()["detail"]

    missing = await gateway.get("/v1/messages/0123456789ABCDEF0123456789ABCDEF")
    assert missing.status_code == 404
    assert problem_type(missing) == "message-not-found"
    assert problem_type(await gateway.get("/v1/messages/not-an-id")) == "message-not-found"
    bad_time = await gateway.get("/v1/topics/orders/messages", params={"key": "k", "begin": "yesterday"})
    assert bad_time.status_code == 400


async def test_idempotency_key_makes_a_repeat_safe(gateway: httpx.AsyncClient) -> None:
    key = f"test-{uuid.uuid4()}"
    first = await send(gateway, "idem", {"body": "once"}, **{"Idempotency-Key": key})
    again = await send(gateway, "idem", {"body": "once"}, **{"Idempotency-Key": key})
    different = await send(gateway, "idem", {"body": "twice"}, **{"Idempotency-Key": key})

    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert different.status_code == 422
    total = 0
    for broker in ("broker-a", "broker-b"):
        for queue in range(8):
            total += len((await pull(gateway, "idem", queue, broker))["messages"])
    assert total == 1


async def test_sends_fail_over_from_a_silent_broker(gateway: httpx.AsyncClient, nameserver: ServedApp) -> None:
    await gateway.put("/v1/topics/orders", json={"queues": 1})
    await register_silent_broker(nameserver, "orders")

    results = [await send(gateway, "orders", {"body": str(i)}) for i in range(6)]

    assert [r.status_code for r in results] == [201] * 6
    assert {r.json()["broker"] for r in results} <= {"broker-a", "broker-b"}


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"delay_level": 19}, "delay_level 19 is not between 1 and 18"),
        ({"delay_level": 0}, "delay_level 0 is not between 1 and 18"),
        ({"delay_level": 1, "delay_ms": 5}, "give at most one of delay_level, delay_ms and deliver_at, not"),
        ({"deliver_at": "tomorrow"}, "deliver_at 'tomorrow' is not a time"),
        ({"deliver_at": "2026-11-21T08:00:00"}, "has no time zone"),
        ({"delay_ms": 31 * 86_400_000}, "the limit is 30 days"),
    ],
)
async def test_bad_schedules_are_refused(gateway: httpx.AsyncClient, fields: dict[str, Any], detail: str) -> None:
    answer = await send(gateway, "orders", {"body": "x", **fields})
    assert answer.status_code == 400, answer.text
    assert detail in answer.json()["detail"]


async def test_a_scheduled_send_answers_its_time_and_is_not_visible(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/later", json={"queues": 1})
    before = math.floor(time.time() * 1000)
    sent = (await send(gateway, "later", {"body": "x", "delay_level": 4})).json()
    after = math.ceil(time.time() * 1000)
    # level 4 is 30 s from the send (how long the send took depends on the machine's load, not its answer)
    assert before + 30_000 <= sent["deliver_at"] <= after + 30_000, (before, sent, after)
    assert before <= sent["stored_at"] <= after, (before, sent, after)
    assert sent["queue_offset"] is None
    page = await pull(gateway, "later", sent["queue_id"], sent["broker"])
    assert page["messages"] == []


@pytest.mark.parametrize(
    "topic", ["RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"]
)
async def test_transaction_topics_cannot_be_read(gateway: httpx.AsyncClient, topic: str) -> None:
    pulled = await gateway.get(f"/v1/topics/{topic}/queues/0/messages")
    by_key = await gateway.get(f"/v1/topics/{topic}/messages", params={"key": "k"})
    for answer in (pulled, by_key):
        assert answer.status_code == 400
        assert answer.json()["type"].endswith("/reserved-topic-name")


async def _a_poll_waiting(gateway: httpx.AsyncClient) -> bool:
    return await long_polls_waiting(gateway) >= 1
