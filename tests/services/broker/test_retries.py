"""A group's retries: read with no filter, and never answered for the message itself.

The retry queue is read with no filter (seed 002: copySubscription, SUB_ALL): a
message that failed under one TAG or SQL92 filter is retried even after the group
changed its filter; the new filter never skips, and so never loses, a pending
retry. A public query by id answers the message in its topic, never a retry or
dead-letter copy, however many there are.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from libs.codec import iter_records
from libs.filters import compile_filter
from libs.message import tags_code
from services.broker.app import create_app
from services.broker.long_polling import PullWaiters
from tests.support.apps import broker_settings, in_process
from tests.support.broker_calls import make_group, put, receive, settle
from tests.support.serving import ServedApp


@pytest.fixture
async def broker(nameserver: ServedApp) -> AsyncIterator[httpx.AsyncClient]:
    settings = broker_settings(nameserver, lease_scan_ms=10, delay_levels="1s 1s 50ms 50ms 50ms")
    async for client in in_process(create_app(settings)):
        await client.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})
        yield client


async def fail_under_tag_a(broker: httpx.AsyncClient) -> str:
    """A message tagged A, received under filter A and nacked into the retry queue at once."""
    (message_id,) = await put(broker, "a", tag="A")
    ((handle, _, _),) = await receive(broker, expression="A")
    (nacked,) = await settle(broker, "nack", handle, delay_ms=0)
    assert nacked["ok"], nacked
    return message_id


async def test_a_retry_is_delivered_after_the_group_changes_its_filter(broker: httpx.AsyncClient) -> None:
    await make_group(broker)
    message_id = await fail_under_tag_a(broker)
    await put(broker, "b", tag="B")

    received = await receive(broker, expression="B")

    assert sorted((r.message_id, attempt) for _, attempt, r in received) == [(message_id, 2), ("ID-b", 1)]
    await settle(broker, "ack", *(h for h, _, _ in received))
    assert await receive(broker, expression="A") == [], "the retry was delivered twice"


async def test_an_sql92_filter_does_not_skip_a_retry_either(broker: httpx.AsyncClient) -> None:
    await make_group(broker)
    message_id = await fail_under_tag_a(broker)

    received = await receive(broker, filter_type="SQL92", expression="TAGS = 'B'")

    assert [(r.message_id, attempt) for _, attempt, r in received] == [(message_id, 2)]


async def test_a_waiting_receive_under_the_new_filter_wakes_for_a_retry(broker: httpx.AsyncClient) -> None:
    await make_group(broker)
    await put(broker, "a", tag="A")
    ((handle, _, _),) = await receive(broker, expression="A")
    waiting = asyncio.create_task(receive(broker, expression="B", wait_ms=20_000))
    await settle(broker, "nack", handle, delay_ms=0)

    received = await asyncio.wait_for(waiting, 10)
    assert [(r.message_id, attempt) for _, attempt, r in received] == [("ID-a", 2)]


async def test_a_fifo_groups_redriven_dead_letter_is_read_under_a_new_filter(broker: httpx.AsyncClient) -> None:
    await make_group(broker, fifo=True, max_retries=0)
    (message_id,) = await put(broker, "a", tag="A")
    ((handle, _, _),) = await receive(broker, expression="A")
    await settle(broker, "nack", handle)
    redriven = await broker.post("/internal/groups/billing/dlq:redrive", json={})
    assert redriven.json()["redriven"] == [message_id]

    received = await receive(broker, expression="B")

    assert [r.message_id for _, _, r in received] == [message_id]


async def test_a_fifo_groups_retry_in_place_is_read_under_a_new_filter(broker: httpx.AsyncClient) -> None:
    await make_group(broker, fifo=True)
    await put(broker, "a", tag="A")
    ((handle, _, _),) = await receive(broker, expression="A")
    await settle(broker, "nack", handle, delay_ms=0)  # suspended for 0 ms, then retried in place

    received = await receive(broker, expression="B")

    assert [(r.message_id, attempt) for _, attempt, r in received] == [("ID-a", 2)]


async def test_a_broadcast_clients_expired_lease_is_read_under_a_new_filter(broker: httpx.AsyncClient) -> None:
    await make_group(broker, broadcast=True)
    await put(broker, "a", tag="A")
    await receive(broker, client_id="one", expression="A", invisible_ms=50)

    received = await receive(broker, client_id="one", expression="B", wait_ms=10_000)

    assert [(r.message_id, attempt) for _, attempt, r in received] == [("ID-a", 2)]


async def test_a_wait_on_a_retry_queue_is_woken_by_any_tag() -> None:
    waiters = PullWaiters()
    waiting = asyncio.create_task(
        waiters.wait_any([("orders", 0)], compile_filter("TAG", "B"), 10, "billing", unfiltered=[("%RETRY%billing", 0)])
    )
    await asyncio.sleep(0)  # one step of the task: its wait is registered
    assert waiters.waiting == 1

    waiters.on_dispatch("orders", 0, 0, tags_code("A"))
    assert not waiting.done(), "a message the filter refuses woke the wait"
    waiters.on_dispatch("%RETRY%billing", 0, 0, tags_code("A"))

    assert await asyncio.wait_for(waiting, 1)
    assert waiters.waiting == 0


async def test_a_public_query_by_id_finds_the_original_behind_its_copies(broker: httpx.AsyncClient) -> None:
    await make_group(broker, max_retries=40)
    (message_id,) = await put(broker, "a")
    for _ in range(41):  # 40 retry copies, then a dead letter: more than one query answers
        ((handle, _, _),) = await receive(broker)
        await settle(broker, "nack", handle, delay_ms=0)

    every = await broker.get(f"/internal/messages/by-id/{message_id}")
    public = await broker.get(f"/internal/messages/by-id/{message_id}", params={"public": "true"})

    assert {r.topic for r in iter_records(every.content)} == {"%RETRY%billing", "%DLQ%billing"}
    assert [(r.topic, r.reconsume_times) for r in iter_records(public.content)] == [("orders", 0)]
