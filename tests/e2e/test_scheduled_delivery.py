"""Scheduled delivery through the gateway, on real processes: levels, delays, exact times, cancel."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import pytest_asyncio

from deploy.plan import ProcessSpec
from deploy.supervisor import Supervisor
from tests.support.cluster import colocated_cluster, local_cluster
from tests.support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]


class Gateway(httpx.AsyncClient):
    """The module's cluster, seen through its gateway; each test sends to a topic of its own."""

    topic = "later"
    supervisor: Supervisor
    timer_spec: ProcessSpec


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["separate", "colocated"])
async def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> AsyncIterator[Gateway]:
    """One cluster for the module (its tests are independent: each has its own topic), separate processes and then
    colocated (the gateway and broker-a in one)."""
    colocated = request.param == "colocated"
    data_dir = tmp_path_factory.mktemp("scheduled") / "data"
    async with (colocated_cluster if colocated else local_cluster)(data_dir) as (running, client):
        gateway = Gateway(base_url=client.base_url, timeout=15)
        gateway.supervisor = running.supervisor
        gateway.timer_spec = running.specs["timer"]
        async with gateway:
            yield gateway


@pytest_asyncio.fixture(loop_scope="module")
async def gateway(cluster: Gateway, request: pytest.FixtureRequest) -> Gateway:
    cluster.topic = f"later-{request.node.name.removeprefix('test_')[:40]}"
    assert (await cluster.put(f"/v1/topics/{cluster.topic}", json={"queues": 1})).status_code == 201
    return cluster


async def send(gateway: Gateway, body: str, **fields: Any) -> dict[str, Any]:
    answer = await gateway.post(f"/v1/topics/{gateway.topic}/messages", json={"body": body, **fields})
    assert answer.status_code == 201, answer.text
    return answer.json()  # type: ignore[no-any-return]


async def delivered(gateway: Gateway) -> list[dict[str, Any]]:
    page = (await gateway.get(f"/v1/topics/{gateway.topic}/queues/0/messages", params={"max": 100})).json()
    return page["messages"]  # type: ignore[no-any-return]


async def timer_figures(gateway: Gateway) -> dict[str, float]:
    """The timer's delivered and cancelled counts, from /v1/timers/stats and its own /metrics."""
    stats = (await gateway.get("/v1/timers/stats")).json()
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(f"{gateway.timer_spec.url}/metrics")).text
    counters = {
        line.split()[0]: float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith(("petrel_timer_delivered_total ", "petrel_timer_cancelled_total "))
    }
    return {
        "delivered": stats["delivered"],
        "cancelled": stats["cancelled"],
        "delivered_total": counters["petrel_timer_delivered_total"],
        "cancelled_total": counters["petrel_timer_cancelled_total"],
    }


async def test_messages_arrive_when_due_in_due_order_and_a_cancelled_one_never(gateway: Gateway) -> None:
    before = await timer_figures(gateway)
    now = int(time.time() * 1000)
    at = datetime.fromtimestamp((now + 2500) / 1000, tz=UTC).isoformat()
    by_time = await send(gateway, "at 2.5 s", deliver_at=at)
    by_delay = await send(gateway, "after 1.8 s", delay_ms=1800)
    level_sent = math.floor(time.time() * 1000)
    by_level = await send(gateway, "level 1 (1 s)", delay_level=1)
    level_answered = math.ceil(time.time() * 1000)
    cancelled = await send(gateway, "cancelled", delay_ms=2000)
    plain = await send(gateway, "now")

    assert by_level["queue_offset"] is None
    # 1 s from the send, however long the send took on a loaded machine
    assert level_sent + 1000 <= by_level["deliver_at"] <= level_answered + 1000, (level_sent, by_level, level_answered)
    assert abs(by_delay["deliver_at"] - (now + 1800)) < 1000
    assert by_time["deliver_at"] == int(datetime.fromisoformat(at).timestamp() * 1000)
    assert (await gateway.delete(f"/v1/messages/{cancelled['message_id']}/schedule")).status_code == 204
    assert [m["body"] for m in await delivered(gateway)] == ["now"], "a scheduled message was visible early"

    async def all_three() -> bool:
        return len(await delivered(gateway)) == 4

    await eventually(all_three, "the three scheduled messages delivered", timeout=10)
    # The cancelled one was due (2 s) before the last one delivered (2.5 s): delivered in due order, it would be here.
    messages = await delivered(gateway)
    assert [m["body"] for m in messages] == ["now", "level 1 (1 s)", "after 1.8 s", "at 2.5 s"]
    assert [m["message_id"] for m in messages] == [
        plain["message_id"],
        by_level["message_id"],
        by_delay["message_id"],
        by_time["message_id"],
    ]
    for message, sent in zip(messages[1:], (by_level, by_delay, by_time), strict=True):
        assert message["stored_at"] >= sent["deliver_at"], f"{message['body']} arrived before it was due"
    after = await timer_figures(gateway)
    assert {name: after[name] - before[name] for name in after} == {
        "delivered": 3,
        "cancelled": 1,
        "delivered_total": 3,
        "cancelled_total": 1,
    }, "the timer's stats and metrics do not count what it delivered and cancelled"
    assert len((await gateway.get("/v1/timers/stats")).json()["levels"]) == 18
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(f"{gateway.timer_spec.url}/metrics")).text
    assert 'petrel_timer_lateness_ms{quantile="0.99"}' in metrics


async def test_a_past_deliver_at_is_delivered_now_and_said_so(gateway: Gateway) -> None:
    sent = await send(gateway, "late", deliver_at=int(time.time() * 1000) - 60_000)
    assert sent["warning"] == "deliver_at is in the past: the message is delivered now"
    assert sent["queue_offset"] == 0
    assert [m["body"] for m in await delivered(gateway)] == ["late"]


async def test_kill_9_of_the_timer_loses_no_scheduled_message(gateway: Gateway) -> None:
    sent = [await send(gateway, f"m{i}", delay_ms=800 + (i % 10) * 150) for i in range(60)]
    sent += [await send(gateway, f"l{i}", delay_level=2) for i in range(20)]  # level 2: 5 s
    supervisor = gateway.supervisor
    timer = next(c for c in supervisor.children if c.spec.name == "timer")

    async def some_delivered() -> bool:
        return len(await delivered_all(gateway)) >= 5

    await eventually(some_delivered, "the first scheduled messages delivered", timeout=10)  # most still pending
    timer.process.kill()
    timer.process.wait()
    supervisor.children.remove(timer)
    await asyncio.to_thread(supervisor.start, gateway.timer_spec)

    wanted = {s["message_id"] for s in sent}

    async def all_delivered() -> bool:
        return wanted <= {m["message_id"] for m in await delivered_all(gateway)}

    await eventually(all_delivered, "every scheduled message delivered after the timer's kill -9", timeout=15)
    ids = [m["message_id"] for m in await delivered_all(gateway)]
    duplicates = len(ids) - len(set(ids))
    print(f"timer kill -9: {len(wanted)} scheduled, all delivered, {duplicates} delivered twice")
    assert duplicates <= len(wanted)


async def delivered_all(gateway: Gateway) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    offset = 0
    while True:
        path = f"/v1/topics/{gateway.topic}/queues/0/messages"
        page = (await gateway.get(path, params={"offset": offset, "max": 256})).json()
        messages.extend(page["messages"])
        if page["next_offset"] >= page["max_offset"]:
            return messages
        offset = page["next_offset"]


async def test_more_messages_due_at_once_than_one_delivery_carries_all_arrive(gateway: Gateway) -> None:
    due = int(time.time() * 1000) + 2500
    batch = {"messages": [{"body": str(i), "deliver_at": due} for i in range(250)]}
    for _ in range(6):  # 1,500 due in the same instant: more than one delivery request (1,024) holds
        answer = await gateway.post(f"/v1/topics/{gateway.topic}/messages:batch", json=batch)
        assert all(r["error"] is None for r in answer.json()["results"])

    async def all_arrived() -> bool:
        return len(await delivered_all(gateway)) == 1500

    await eventually(all_arrived, "1,500 messages due at once all delivered", timeout=15)


async def test_a_cancelled_message_is_no_longer_pending_once_the_cancel_is_answered(gateway: Gateway) -> None:
    later = await send(gateway, "in an hour", delay_ms=3_600_000)
    level = await send(gateway, "level 18 (2 h)", delay_level=18)

    before: dict[str, Any] = {}

    async def both_pending() -> bool:
        before.update((await gateway.get("/v1/timers/stats")).json())
        return bool(before["wheel_pending"] >= 1 and before["levels"][17]["pending"] >= 1)

    await eventually(both_pending, "the two messages pending in the timer's stats", timeout=10)
    for sent in (later, level):
        assert (await gateway.delete(f"/v1/messages/{sent['message_id']}/schedule")).status_code == 204
    after = (await gateway.get("/v1/timers/stats")).json()
    assert (
        after["wheel_pending"] - before["wheel_pending"],
        after["levels"][17]["pending"] - before["levels"][17]["pending"],
        after["cancelled"] - before["cancelled"],
    ) == (-1, -1, 2), "a cancel answered 204 left the message pending in /v1/timers/stats"
    assert (await gateway.delete(f"/v1/messages/{later['message_id']}/schedule")).status_code == 204
    assert (await gateway.get("/v1/timers/stats")).json()["cancelled"] == after["cancelled"], "a repeat counted"
