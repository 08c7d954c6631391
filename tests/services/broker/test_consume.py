"""The broker's consumer groups: leases, acks, nacks into retry, dead letters, FIFO, broadcast, offsets."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from libs.codec import iter_records
from libs.events.contract import events_of
from libs.message import MessageRecord, Prop
from libs.receipt import ReceiptHandle, ReceiptKey
from services.broker.app import create_app
from tests.support.apps import broker_settings, in_process
from tests.support.broker_calls import bodies, gauge, make_group, put, receive, settle
from tests.support.clock import FakeClock
from tests.support.serving import ServedApp
from tests.support.waiting import eventually


@pytest.fixture
async def broker(nameserver: ServedApp) -> AsyncIterator[httpx.AsyncClient]:
    settings = broker_settings(nameserver, lease_scan_ms=10, delay_levels="1s 1s 50ms 50ms 50ms")
    async for client in in_process(create_app(settings)):
        await client.put("/internal/topics/orders", json={"read_queues": 2, "write_queues": 2})
        yield client


async def test_received_messages_are_invisible_until_acked_then_gone(broker: httpx.AsyncClient) -> None:
    await make_group(broker)
    await put(broker, "a", "b")
    first = await receive(broker)
    assert bodies(first) == ["a", "b"]
    assert [attempt for _, attempt, _ in first] == [1, 1]
    assert await receive(broker) == [], "a leased message was delivered twice while its lease held"

    results = await settle(broker, "ack", *(h for h, _, _ in first))
    assert [r["ok"] for r in results] == [True, True]
    lag = (await broker.get("/internal/groups/billing/lag")).json()["queues"]
    assert {(q["topic"], q["queue_id"]): (q["lag"], q["in_flight"]) for q in lag}[("orders", 0)] == (0, 0)


async def test_a_second_ack_and_a_forged_handle_get_clear_answers(broker: httpx.AsyncClient) -> None:
    await make_group(broker)
    await put(broker, "a")
    ((handle, _, _),) = await receive(broker)
    await settle(broker, "ack", handle)
    tampered = dataclasses.replace(ReceiptHandle.decode(handle), queue_offset=1).encode(
        ReceiptKey(b"not the broker's key")
    )

    again, bad, garbage = await settle(broker, "ack", handle, tampered, "nonsense")
    assert again["error"]["type"].endswith("/already-acked")
    assert bad["error"]["status"] == 400
    assert "signature" in bad["error"]["detail"]
    assert garbage["error"]["type"].endswith("/invalid-receipt-handle")


async def test_another_groups_handle_is_refused(broker: httpx.AsyncClient) -> None:
    await make_group(broker)
    await make_group(broker, "audit")
    await put(broker, "a")
    ((handle, _, _),) = await receive(broker)
    (result,) = await settle(broker, "ack", handle, group="audit")
    assert result["error"]["type"].endswith("/foreign-receipt-handle")


async def test_a_nack_brings_the_message_back_through_the_retry_queue(broker: httpx.AsyncClient) -> None:
    await make_group(broker)
    (message_id,) = await put(broker, "a")
    ((handle, _, _),) = await receive(broker)
    (result,) = await settle(broker, "nack", handle, delay_ms=0, reason="db down")
    assert result["ok"]

    ((_, attempt, record),) = await receive(broker)
    assert (record.message_id, attempt, record.topic) == (message_id, 2, "%RETRY%billing")
    assert record.properties[Prop.RETRY_TOPIC] == "orders"
    (late,) = await settle(broker, "ack", handle)
    assert late["error"]["status"] == 409


async def test_an_expired_lease_is_a_failed_attempt_retried_after_the_backoff(nameserver: ServedApp) -> None:
    # levels "1s 1s 50ms ...": the first retry uses level 3, 50 ms here; the timer service would
    # deliver it from SCHEDULE_TOPIC_XXXX: without one, it waits there.
    clock = FakeClock(time.time())
    settings = broker_settings(nameserver, lease_scan_ms=10, delay_levels="1s 1s 50ms 50ms 50ms")
    async for broker in in_process(create_app(settings, clock=clock)):
        await broker.put("/internal/topics/orders", json={"read_queues": 2, "write_queues": 2})
        await make_group(broker)
        await put(broker, "a")
        ((handle, _, _),) = await receive(broker, invisible_ms=50)
        clock.advance(0.2)
        (result,) = await settle(broker, "ack", handle)
        assert result["error"]["type"].endswith("/lease-expired"), result
        await eventually(
            functools.partial(_retry_scheduled, broker), "the expired lease's retry copy in SCHEDULE_TOPIC_XXXX"
        )
        (copy,) = await scheduled_retries(broker)
        assert copy.properties[Prop.REAL_TOPIC] == "%RETRY%billing"
        assert copy.reconsume_times == 1


async def scheduled_retries(broker: httpx.AsyncClient) -> list[MessageRecord]:
    """Copies waiting in the schedule queue of delay level 3 (50 ms here)."""
    answer = await broker.get("/internal/topics/SCHEDULE_TOPIC_XXXX/queues/2/messages", params={"offset": 0})
    return list(iter_records(answer.content)) if answer.status_code == 200 else []


async def _retry_scheduled(broker: httpx.AsyncClient) -> bool:
    return bool(await scheduled_retries(broker))


async def test_after_max_retries_the_message_is_dead_lettered_with_its_reason(broker: httpx.AsyncClient) -> None:
    await make_group(broker, max_retries=2)
    (message_id,) = await put(broker, "poison")
    for attempt in (1, 2, 3):
        ((handle, seen, _),) = await receive(broker)
        assert seen == attempt
        await settle(broker, "nack", handle, delay_ms=0, reason=f"boom {attempt}")
    assert await receive(broker) == []

    dlq = await broker.get("/internal/groups/billing/dlq")
    (dead,) = iter_records(dlq.content)
    assert dead.message_id == message_id
    assert dead.reconsume_times + 1 == 3
    assert "boom 3" in dead.properties[Prop.DLQ_REASON]
    assert dead.properties[Prop.RETRY_TOPIC] == "orders"

    redriven = (await broker.post("/internal/groups/billing/dlq:redrive", json={})).json()
    assert redriven == {"redriven": [message_id], "not_found": [], "remaining": 0}
    ((_, attempt, back),) = await receive(broker)
    assert (back.message_id, attempt) == (message_id, 1)
    again = (await broker.post("/internal/groups/billing/dlq:redrive", json={})).json()
    assert again["redriven"] == [], "redrive all sent a dead letter twice"


async def test_fifo_group_delivers_one_at_a_time_per_queue_in_order(broker: httpx.AsyncClient) -> None:
    await make_group(broker, fifo=True, fifo_suspend_ms=50, max_retries=1)
    await put(broker, "1", "2", "3")
    ((handle, _, first),) = await receive(broker)
    assert first.body == b"1"
    assert await receive(broker) == [], "a later message was delivered while the first was leased"

    await settle(broker, "nack", handle)
    assert await receive(broker) == [], "a failed FIFO message did not hold its queue for the suspension"
    ((handle, attempt, again),) = await receive(broker, wait_ms=2_000)
    assert (again.body, attempt) == (b"1", 2)
    await settle(broker, "nack", handle)  # max_retries 1: dead-lettered, the queue moves on
    ((handle, _, second),) = await receive(broker, wait_ms=2_000)
    assert second.body == b"2"
    await settle(broker, "ack", handle)
    ((_, _, third),) = await receive(broker)
    assert third.body == b"3"


async def test_broadcast_gives_every_client_every_message(broker: httpx.AsyncClient) -> None:
    await make_group(broker, broadcast=True)
    await put(broker, "a", "b")
    one = await receive(broker, client_id="one")
    two = await receive(broker, client_id="two")
    assert bodies(one) == bodies(two) == ["a", "b"]
    missing = await broker.post(
        "/internal/groups/billing/topics/orders/receive", json={"max_messages": 1, "invisible_ms": 1000}
    )
    assert missing.status_code == 400


async def test_a_waiting_receive_is_woken_by_a_send(broker: httpx.AsyncClient) -> None:
    await make_group(broker)
    waiting = asyncio.create_task(receive(broker, wait_ms=5_000))
    await eventually(lambda: _polls_waiting(broker, 1), "the receive waits in the broker")
    assert not waiting.done(), "a receive with wait_ms answered before anything arrived"
    await put(broker, "late", queue_id=1)
    received = await asyncio.wait_for(waiting, 2)
    assert bodies(received) == ["late"]


async def _polls_waiting(broker: httpx.AsyncClient, count: int) -> bool:
    return await gauge(broker, "petrel_broker_long_polls_waiting") == count


async def test_reset_rewinds_to_a_time_or_an_offset(broker: httpx.AsyncClient) -> None:
    await make_group(broker)
    await put(broker, "a", "b")
    for handle, _, _ in await receive(broker):
        await settle(broker, "ack", handle)
    answer = await broker.post("/internal/groups/billing/topics/orders/offsets:reset", json={"offset": 0})
    assert answer.json()["queues"][0] == {"queue_id": 0, "offset": 0}
    assert bodies(await receive(broker)) == ["a", "b"]
    both = await broker.post("/internal/groups/billing/topics/orders/offsets:reset", json={"offset": 0, "timestamp": 1})
    assert both.status_code == 400


async def test_unknown_group_and_topic_are_404(broker: httpx.AsyncClient) -> None:
    answer = await broker.post("/internal/groups/nobody/topics/orders/receive", json={})
    assert answer.status_code == 404
    assert answer.json()["type"].endswith("/group-not-found")
    await make_group(broker)
    answer = await broker.post("/internal/groups/billing/topics/nothing/receive", json={})
    assert answer.json()["type"].endswith("/topic-not-found")


async def test_messages_in_flight_come_back_after_a_restart(nameserver: ServedApp) -> None:
    settings = broker_settings(nameserver, lease_scan_ms=10)
    async for client in in_process(create_app(settings)):
        await client.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})
        await make_group(client)
        await put(client, "a", "b")
        received = await receive(client)
        await settle(client, "ack", received[0][0])
        leftover = received[1][0]
    async for client in in_process(create_app(settings)):
        again = await receive(client)
        assert bodies(again) == ["b"], "a message leased before the restart was lost or an acked one came back"
        (late,) = await settle(client, "ack", leftover)
        assert late["error"]["type"].endswith("/lease-lost")


async def test_the_lifecycle_of_a_failing_message_is_in_the_event_log(nameserver: ServedApp) -> None:
    settings = broker_settings(nameserver, events_enabled=True)
    async for client in in_process(create_app(settings)):
        await client.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})
        await make_group(client, max_retries=1)
        (message_id,) = await put(client, "a")
        for _ in range(2):
            ((handle, _, _),) = await receive(client)
            await settle(client, "nack", handle, delay_ms=0, reason="boom")
        await client.post("/internal/groups/billing/dlq:redrive", json={})
        ((handle, _, _),) = await receive(client)
        await settle(client, "ack", handle)

    files = (settings.data_dir / "export" / "events").rglob("broker-*.jsonl")
    lines = [e for path in files for line in path.read_text().splitlines() for e in events_of(json.loads(line))]
    story = [e["event"] for e in lines if e.get("message_id") == message_id and e["event"] not in ("stored",)]
    assert story == [
        "delivered",
        "nacked",
        "retried",
        "delivered",
        "nacked",
        "dead_lettered",
        "redriven",
        "delivered",
        "acked",
    ]
    assert all(e["group"] == "billing" for e in lines if e["event"] != "stored")


async def test_concurrent_first_receives_of_a_new_group_all_succeed(broker: httpx.AsyncClient) -> None:
    await make_group(broker)
    await put(broker, *[str(i) for i in range(8)])
    answers = await asyncio.gather(*(receive(broker, max_messages=1) for _ in range(8)))
    assert sorted(b for received in answers for b in bodies(received)) == [str(i) for i in range(8)]
