"""`/v1/groups/{group}/subscriptions`: the gateway over the push service's subscriptions API (in-process)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp

from libs.http.asgi import running
from tests.support.gateway_calls import problem_type
from tests.support.push_subscriptions import INSIDE, RecordingLive, subscriptions_app
from tests.support.serving import free_port

HOOK = "https://hooks.example.com/petrel"
SUBSCRIPTION = "/v1/groups/billing/subscriptions/orders"


@pytest.fixture
def push_address() -> str:
    return f"127.0.0.1:{free_port()}"


@pytest.fixture
def gateway_overrides(push_address: str) -> dict[str, Any]:
    return {"push_address": push_address}


@pytest.fixture
async def push_service(
    push_address: str, in_process_apps: dict[str, ASGIApp], tmp_path: Path
) -> AsyncIterator[RecordingLive]:
    """The push service's subscriptions API at `push_address`, in-process (a test without it finds none there)."""
    live = RecordingLive()
    app, _ = subscriptions_app(f"sqlite:///{tmp_path / 'push.db'}", live)
    async with running(app) as started:
        in_process_apps[push_address] = started
        yield live


@pytest.fixture
async def billing(gateway: httpx.AsyncClient) -> None:
    """A consumer group `billing` and a topic `orders`."""
    assert (await gateway.put("/v1/groups/billing")).status_code == 201
    assert (await gateway.put("/v1/topics/orders")).status_code == 201


@pytest.mark.usefixtures("billing")
async def test_a_subscription_from_put_to_delete(gateway: httpx.AsyncClient, push_service: RecordingLive) -> None:
    created = await gateway.put(SUBSCRIPTION, json={"endpoint_url": HOOK, "max_in_flight": 8})
    assert created.status_code == 201, created.text
    secret = created.json()["signing_secret"]
    assert secret.startswith("whsec_")
    assert (created.json()["max_in_flight"], created.json()["status"]["state"]) == (8, "active")
    assert [s.key for s in push_service.applied] == [("billing", "orders")]

    updated = await gateway.put(SUBSCRIPTION, json={"endpoint_url": HOOK})
    assert updated.status_code == 200, updated.text
    assert updated.json()["signing_secret"] is None
    assert (await gateway.get(SUBSCRIPTION)).json()["signing_secret"] is None
    listed = (await gateway.get("/v1/groups/billing/subscriptions")).json()["subscriptions"]
    assert [(s["group"], s["topic"]) for s in listed] == [("billing", "orders")]

    paused = await gateway.post(f"{SUBSCRIPTION}:pause")
    assert (paused.status_code, paused.json()["status"]["state"]) == (200, "paused")
    resumed = await gateway.post(f"{SUBSCRIPTION}:resume")
    assert (resumed.status_code, resumed.json()["status"]["state"]) == (200, "active")

    rotated = await gateway.post(f"{SUBSCRIPTION}:rotate-secret", json={"overlap_seconds": 600})
    assert rotated.status_code == 200, rotated.text
    assert rotated.json()["signing_secret"] not in (None, secret)
    assert rotated.json()["secret_overlap_until"] is not None
    assert (await gateway.post(f"{SUBSCRIPTION}:rotate-secret")).status_code == 200

    attempts = await gateway.get(f"{SUBSCRIPTION}/attempts", params={"limit": 10})
    assert (attempts.status_code, attempts.json()) == (200, {"attempts": []})

    assert (await gateway.delete(SUBSCRIPTION)).status_code == 204
    assert push_service.removed == [("billing", "orders")]
    gone = await gateway.get(SUBSCRIPTION)
    assert gone.status_code == 404, gone.text
    assert problem_type(gone) == "subscription-not-found"


@pytest.mark.usefixtures("billing", "push_service")
@pytest.mark.parametrize("host", sorted(INSIDE))
async def test_the_push_services_refusal_crosses_unchanged_without_the_address(
    gateway: httpx.AsyncClient, host: str
) -> None:
    refused = await gateway.put(SUBSCRIPTION, json={"endpoint_url": f"http://{host}/hook"})
    assert refused.status_code == 400, refused.text
    assert problem_type(refused) == "invalid-request"
    assert f"{host} does not resolve, or not only to public internet addresses" in refused.json()["detail"]
    assert not [address for address in INSIDE[host] if address in refused.text], refused.text


@pytest.mark.usefixtures("billing", "push_service")
async def test_a_put_needs_the_group_and_the_topic(gateway: httpx.AsyncClient) -> None:
    no_group = await gateway.put("/v1/groups/nobody/subscriptions/orders", json={"endpoint_url": HOOK})
    assert no_group.status_code == 404, no_group.text
    assert problem_type(no_group) == "group-not-found"

    no_topic = await gateway.put("/v1/groups/billing/subscriptions/nothing", json={"endpoint_url": HOOK})
    assert no_topic.status_code == 404, no_topic.text
    assert problem_type(no_topic) == "topic-not-found"

    assert (await gateway.put("/v1/groups/everyone", json={"broadcast": True})).status_code == 201
    broadcast = await gateway.put("/v1/groups/everyone/subscriptions/orders", json={"endpoint_url": HOOK})
    assert broadcast.status_code == 400, broadcast.text
    assert "a broadcast group cannot be pushed to" in broadcast.json()["detail"]

    for path, kind in (
        ("/v1/groups/bad%20name/subscriptions/orders", "invalid-request"),
        ("/v1/groups/billing/subscriptions/%25DLQ%25billing", "invalid-topic-name"),
    ):
        answer = await gateway.put(path, json={"endpoint_url": HOOK})
        assert answer.status_code == 400, answer.text
        assert problem_type(answer) == kind


@pytest.mark.usefixtures("billing")
async def test_a_push_service_that_does_not_answer_is_a_503(gateway: httpx.AsyncClient, push_address: str) -> None:
    for answer in (
        await gateway.put(SUBSCRIPTION, json={"endpoint_url": HOOK}),
        await gateway.get(SUBSCRIPTION),
        await gateway.get("/v1/groups/billing/subscriptions"),
    ):
        assert answer.status_code == 503, answer.text
        assert problem_type(answer) == "service-unavailable"
        assert answer.json()["detail"].startswith(f"the push service at {push_address} did not answer: ")
