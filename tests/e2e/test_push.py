"""Push subscriptions on real processes: the gateway, the push service and a broker, to a receiver on loopback.

The receiver (tests.support.webhook_endpoint) verifies every signature with the
Standard Webhooks reference implementation and measures what it is sent.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from libs.cluster_token import INTERNAL_TOKEN_HEADER
from tests.support.cluster import LocalCluster, local_cluster_with_push
from tests.support.serving import ServedApp, serving
from tests.support.waiting import eventually
from tests.support.webhook_endpoint import Answer, Delivery, WebhookEndpoint

pytestmark = pytest.mark.e2e

FAST_RETRIES = {"type": "exponential", "initial_ms": 100, "max_ms": 200}


@pytest.fixture
def cluster(shared_push: LocalCluster, shared_gateway: httpx.AsyncClient) -> tuple[LocalCluster, httpx.AsyncClient]:
    """The shared cluster (tests/e2e/conftest.py: a cluster token, a circuit that opens after 3 troubles and probes
    after 1 s) for the tests that kill nothing: each has its own group and topic (`unique`)."""
    return shared_push, shared_gateway


@pytest.fixture
def endpoint() -> Iterator[tuple[WebhookEndpoint, ServedApp]]:
    receiver = WebhookEndpoint()
    with serving(receiver.app()) as served:
        yield receiver, served


async def subscribe(
    client: httpx.AsyncClient,
    group: str,
    topic: str,
    served: ServedApp,
    receiver: WebhookEndpoint,
    *,
    topic_type: str = "NORMAL",
    group_config: dict[str, Any] | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """Topic, group and subscription; the receiver learns the secret."""
    answer = await client.put(f"/v1/topics/{topic}", json={"queues": 4, "message_type": topic_type})
    assert answer.status_code in (200, 201), answer.text
    answer = await client.put(f"/v1/groups/{group}", json=group_config or {})
    assert answer.status_code in (200, 201), answer.text
    body = {"endpoint_url": f"{served.url}/hook"} | settings
    answer = await client.put(f"/v1/groups/{group}/subscriptions/{topic}", json=body)
    assert answer.status_code == 201, answer.text
    subscription: dict[str, Any] = answer.json()
    receiver.reset(subscription["signing_secret"])
    return subscription


async def send(client: httpx.AsyncClient, topic: str, *bodies: str, **fields: Any) -> list[str]:
    entries = [{"body": b} | fields for b in bodies]
    answer = await client.post(f"/v1/topics/{topic}/messages:batch", json={"messages": entries})
    assert answer.status_code == 200, answer.text
    return [entry["result"]["message_id"] for entry in answer.json()["results"]]


async def lag(client: httpx.AsyncClient, group: str) -> int:
    answer = await client.get(f"/v1/groups/{group}/lag")
    assert answer.status_code == 200, answer.text
    return int(answer.json()["total_lag"])


async def status(client: httpx.AsyncClient, group: str, topic: str) -> dict[str, Any]:
    answer = await client.get(f"/v1/groups/{group}/subscriptions/{topic}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def log_of(cluster: LocalCluster) -> str:
    return cluster.log("push")[-3000:]


async def test_every_message_arrives_signed_once_and_is_acked(
    cluster: tuple[LocalCluster, httpx.AsyncClient],
    endpoint: tuple[WebhookEndpoint, ServedApp],
    unique: Callable[[str], str],
) -> None:
    running, client = cluster
    receiver, served = endpoint
    group, topic = unique("billing"), unique("orders")
    subscription = await subscribe(client, group, topic, served, receiver)
    assert subscription["signing_secret"].startswith("whsec_")
    assert (await status(client, group, topic))["signing_secret"] is None, "the secret is shown once"

    ids = await send(client, topic, *(f"order {i}" for i in range(20)), tag="paid")

    async def all_acked() -> bool:
        return receiver.seen() == set(ids) and await lag(client, group) == 0

    await eventually(all_acked, "20 messages pushed and acked", timeout=15, context=lambda: log_of(running))
    assert all(d.verified for d in receiver.deliveries), "a signature the reference implementation refuses"
    assert sorted(len(receiver.of(i)) for i in ids) == [1] * 20, "a message pushed twice without a crash"
    first = receiver.of(ids[0])[0]
    assert (first.attempt, first.data["tag"], first.data["topic"]) == (1, "paid", topic)
    assert first.headers["webhook-id"] == ids[0] == first.data["message_id"]
    metrics = (await client.get(f"{running.specs['push'].url}/metrics")).text
    assert f'petrel_push_attempts_total{{group="{group}",outcome="acked",topic="{topic}"}} 20.0' in metrics
    shown = await status(client, group, topic)
    assert shown["status"]["acked"] == 20
    assert shown["status"]["state"] == "active"


async def test_the_cluster_token_never_reaches_an_endpoint(
    cluster: tuple[LocalCluster, httpx.AsyncClient],
    endpoint: tuple[WebhookEndpoint, ServedApp],
    unique: Callable[[str], str],
) -> None:
    running, client = cluster
    receiver, served = endpoint
    group, topic = unique("tokens"), unique("invoices")
    token = running.internal_headers()[INTERNAL_TOKEN_HEADER]
    attempts = iter([Answer(503), Answer(200)])
    receiver.answer = lambda _: next(attempts, Answer(200))  # a retry too: a fresh attempt, the same session
    await subscribe(client, group, topic, served, receiver, group_config={"retry_policy": FAST_RETRIES})

    ids = await send(client, topic, "invoice 1", "invoice 2")

    async def all_acked() -> bool:
        return receiver.seen() == set(ids) and await lag(client, group) == 0

    await eventually(all_acked, "2 messages pushed and acked", timeout=15, context=lambda: log_of(running))
    assert len(receiver.deliveries) == 3
    for delivery in receiver.deliveries:
        assert INTERNAL_TOKEN_HEADER not in delivery.headers
        assert not any(token in value for value in delivery.headers.values()), delivery.headers
        assert token.encode() not in delivery.body
    push_url = running.specs["push"].url
    assert (await client.get(f"{push_url}/internal/subscriptions")).status_code == 401, "the cluster has no token"


async def test_a_message_answered_500_retries_into_the_dlq_while_the_others_flow(
    cluster: tuple[LocalCluster, httpx.AsyncClient],
    endpoint: tuple[WebhookEndpoint, ServedApp],
    unique: Callable[[str], str],
) -> None:
    running, client = cluster
    receiver, served = endpoint
    group, topic = unique("shipping"), unique("parcels")
    receiver.answer = lambda d: Answer(500) if d.text == "poison" else Answer(200)
    group_config = {"max_retries": 2, "retry_policy": FAST_RETRIES}
    await subscribe(client, group, topic, served, receiver, group_config=group_config)

    poison, *good = await send(client, topic, "poison", *(f"parcel {i}" for i in range(10)))

    async def dead_lettered() -> bool:
        answer = await client.get(f"/v1/groups/{group}/dlq")
        return any(m["message_id"] == poison for m in answer.json()["messages"])

    await eventually(dead_lettered, "the poison message in the DLQ", timeout=20, context=lambda: log_of(running))
    assert [d.attempt for d in receiver.of(poison)] == [1, 2, 3]
    assert all(len(receiver.of(i)) == 1 for i in good), "a good message was pushed more than once"
    dead = next(
        m for m in (await client.get(f"/v1/groups/{group}/dlq")).json()["messages"] if m["message_id"] == poison
    )
    assert "HTTP 500" in dead["reason"]
    attempts = (await client.get(f"/v1/groups/{group}/subscriptions/{topic}/attempts")).json()["attempts"]
    assert [a["outcome"] for a in attempts if a["message_id"] == poison] == ["failed"] * 3
    traced = (await client.get(f"/v1/messages/{poison}/trace")).json()
    (pushed,) = [p for p in traced["push"] if p["group"] == group]
    assert (pushed["attempts"], pushed["last_status"], pushed["delivered"]) == (3, 500, False)
    assert [g["state"] for g in traced["groups"] if g["group"] == group] == ["dead_lettered"]


async def test_a_429_storm_slows_the_push_honours_retry_after_and_costs_no_attempt(
    cluster: tuple[LocalCluster, httpx.AsyncClient],
    endpoint: tuple[WebhookEndpoint, ServedApp],
    unique: Callable[[str], str],
) -> None:
    running, client = cluster
    receiver, served = endpoint
    group, topic = unique("search"), unique("documents")
    storm = {"left": 5}

    def throttle(_: Delivery) -> Answer:
        if storm["left"] > 0:
            storm["left"] -= 1
            return Answer(429, {"Retry-After": "1"})
        return Answer(200)

    receiver.answer = throttle
    await subscribe(client, group, topic, served, receiver, max_in_flight=8)
    ids = await send(client, topic, *(f"doc {i}" for i in range(16)))

    async def all_acked() -> bool:
        return receiver.seen() == set(ids) and await lag(client, group) == 0

    await eventually(all_acked, "every document pushed after the storm", timeout=30, context=lambda: log_of(running))
    assert {d.attempt for d in receiver.deliveries} == {1}, "a throttled try was counted as an attempt"
    storm_starts = [d.started for d in receiver.deliveries[:6]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(storm_starts)]
    assert min(gaps) >= 0.9, f"a try came before the Retry-After of 1 s ran out: {gaps}"
    shown = (await status(client, group, topic))["status"]
    assert shown["throttled"] == 5
    assert shown["failed"] == 0
    assert shown["acked"] == 16


async def test_sustained_trouble_opens_the_circuit_which_probes_and_closes_by_itself(
    cluster: tuple[LocalCluster, httpx.AsyncClient],
    endpoint: tuple[WebhookEndpoint, ServedApp],
    unique: Callable[[str], str],
) -> None:
    running, client = cluster
    receiver, served = endpoint
    group, topic = unique("alerts"), unique("pages")
    down = {"yes": True}
    receiver.answer = lambda _: Answer(503) if down["yes"] else Answer(200)
    await subscribe(client, group, topic, served, receiver)
    ids = await send(client, topic, *(f"page {i}" for i in range(6)))

    async def circuit_open() -> bool:
        return bool((await status(client, group, topic))["status"]["state"] == "circuit_open")

    await eventually(circuit_open, "the circuit open after 3 troubles in a row", timeout=15)
    opened = len(receiver.deliveries)
    shown = (await status(client, group, topic))["status"]
    assert shown["circuit_opened_at"] is not None
    assert shown["window"] == 1
    down["yes"] = False

    async def all_acked() -> bool:
        return receiver.seen() == set(ids) and await lag(client, group) == 0

    await eventually(
        all_acked, "every page pushed once the probe succeeded", timeout=20, context=lambda: log_of(running)
    )
    assert receiver.deliveries[opened].message_id == receiver.deliveries[opened - 1].message_id, "the probe"
    assert {d.attempt for d in receiver.deliveries} == {1}, "a try while the endpoint was down counted as an attempt"
    assert (await status(client, group, topic))["status"]["state"] == "active"


async def test_410_disables_the_subscription_and_resume_delivers_what_waited(
    cluster: tuple[LocalCluster, httpx.AsyncClient],
    endpoint: tuple[WebhookEndpoint, ServedApp],
    unique: Callable[[str], str],
) -> None:
    running, client = cluster
    receiver, served = endpoint
    group, topic = unique("legacy"), unique("events")
    receiver.answer = lambda _: Answer(410)
    await subscribe(client, group, topic, served, receiver)
    ids = await send(client, topic, *(f"event {i}" for i in range(5)))

    async def disabled() -> bool:
        return bool((await status(client, group, topic))["status"]["state"] == "disabled")

    await eventually(disabled, "the subscription disabled by 410", timeout=15, context=lambda: log_of(running))
    shown = await status(client, group, topic)
    assert "410" in shown["disabled_reason"]

    async def all_waiting() -> bool:
        return await lag(client, group) == 5

    await eventually(all_waiting, "the five messages waiting in the group (the one answered 410 given back)")

    receiver.answer = lambda _: Answer(200)
    answer = await client.post(f"/v1/groups/{group}/subscriptions/{topic}:resume")
    assert answer.status_code == 200, answer.text

    async def all_acked() -> bool:
        return set(ids) <= receiver.seen() and await lag(client, group) == 0

    await eventually(
        all_acked, "the waiting messages delivered after resume", timeout=15, context=lambda: log_of(running)
    )


async def test_a_deferred_answer_leaves_the_ack_to_the_receiver(
    cluster: tuple[LocalCluster, httpx.AsyncClient],
    endpoint: tuple[WebhookEndpoint, ServedApp],
    unique: Callable[[str], str],
) -> None:
    _, client = cluster
    receiver, served = endpoint
    group, topic = unique("reports"), unique("jobs")
    receiver.answer = lambda _: Answer(202, {"Petrel-Ack": "deferred"})
    await subscribe(client, group, topic, served, receiver, invisible_seconds=30)
    (job,) = await send(client, topic, "render the report")

    async def delivered() -> bool:
        return bool(receiver.of(job))

    await eventually(delivered, "the job pushed", timeout=15)
    assert await lag(client, group) == 1, "a deferred message must stay leased, not acked"
    handle = receiver.of(job)[0].handle
    answer = await client.post(f"/v1/groups/{group}/ack", json={"receipt_handles": [handle]})
    assert answer.json()["results"][0]["ok"], answer.text

    async def acked() -> bool:
        return await lag(client, group) == 0

    await eventually(acked, "the receiver's own ack settled the job")
    assert len(receiver.of(job)) == 1
    assert (await status(client, group, topic))["status"]["deferred"] == 1


async def test_max_in_flight_and_rate_per_second_are_never_exceeded(
    cluster: tuple[LocalCluster, httpx.AsyncClient],
    endpoint: tuple[WebhookEndpoint, ServedApp],
    unique: Callable[[str], str],
) -> None:
    _, client = cluster
    receiver, served = endpoint
    group, topic = unique("mailer"), unique("emails")
    receiver.answer = lambda _: Answer(200, delay=0.1)
    await subscribe(client, group, topic, served, receiver, max_in_flight=3, rate_per_second=20)
    ids = await send(client, topic, *(f"mail {i}" for i in range(60)))

    async def all_acked() -> bool:
        return receiver.seen() == set(ids) and await lag(client, group) == 0

    await eventually(all_acked, "60 emails pushed", timeout=30)
    assert receiver.max_in_flight <= 3
    starts = sorted(d.started for d in receiver.deliveries)
    busiest = max(sum(1 for s in starts if t <= s < t + 1.0) for t in starts)
    assert busiest <= 20 + 1, f"{busiest} deliveries started within one second, the cap is 20 (burst 1)"


async def test_fifo_keeps_each_keys_order_and_runs_keys_side_by_side(
    cluster: tuple[LocalCluster, httpx.AsyncClient],
    endpoint: tuple[WebhookEndpoint, ServedApp],
    unique: Callable[[str], str],
) -> None:
    _, client = cluster
    receiver, served = endpoint
    group, topic = unique("ledger"), unique("accounts")
    receiver.answer = lambda _: Answer(200, delay=0.05)
    await subscribe(
        client, group, topic, served, receiver, topic_type="FIFO", group_config={"fifo": True}, max_in_flight=8
    )
    sent: dict[str, list[str]] = {}
    for key in ("alice", "bob", "carol", "dave"):
        sent[key] = await send(client, topic, *(f"{key} {i}" for i in range(8)), message_group=key)
    ids = {i for key in sent.values() for i in key}

    async def all_acked() -> bool:
        return receiver.seen() == ids and await lag(client, group) == 0

    await eventually(all_acked, "32 FIFO messages pushed", timeout=30)
    arrived: dict[str, list[str]] = collections.defaultdict(list)
    for delivery in receiver.deliveries:
        arrived[delivery.data["message_group"]].append(delivery.message_id)
    assert dict(arrived) == sent, "a key's messages arrived out of order"
    assert receiver.max_in_flight >= 2, "keys on different queues were not pushed side by side"


async def test_kill_9_of_the_push_service_mid_delivery_loses_nothing(
    tmp_path: Path, endpoint: tuple[WebhookEndpoint, ServedApp]
) -> None:
    receiver, served = endpoint
    held = threading.Event()

    async def hold_until_the_kill(_: Delivery) -> Answer:
        await asyncio.to_thread(held.wait, 30)  # answered only once the push service that asked is dead
        return Answer(200)

    receiver.answer = hold_until_the_kill
    async with local_cluster_with_push(tmp_path / "data") as (running, client):
        await subscribe(
            client,
            "crash",
            "payments",
            served,
            receiver,
            invisible_seconds=3,
            timeout_seconds=5,
            max_in_flight=4,
            group_config={"retry_policy": FAST_RETRIES},
        )
        ids = await send(client, "payments", *(f"payment {i}" for i in range(12)))

        async def some_in_flight() -> bool:
            return receiver.in_flight > 0

        await eventually(some_in_flight, "deliveries under way", timeout=15)
        await running.kill("push")
        in_flight_at_kill = receiver.seen()  # none was answered before the kill
        held.set()
        await running.restart("push")

        async def all_acked() -> bool:
            redelivered = all(len(receiver.of(i)) == 2 for i in in_flight_at_kill)
            return redelivered and receiver.seen() == set(ids) and await lag(client, "crash") == 0

        await eventually(all_acked, "every payment acked after the crash", timeout=30, context=lambda: log_of(running))
    twice = {i for i in ids if len(receiver.of(i)) > 1}
    assert twice == in_flight_at_kill, "a duplicate of a message that was not in flight at the kill"
    assert all(receiver.of(i)[-1].attempt == 2 for i in twice), "a redelivery after the lease must be counted"
