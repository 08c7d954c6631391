"""The push service's internal subscriptions API, in-process over a real store (SQLite; PostgreSQL once)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from libs.push_api.schemas import PushAttempt
from libs.webhooks import SECRET_PREFIX, new_secret
from services.push.subscriptions import SubscriptionStore
from tests.support.apps import in_process
from tests.support.databases import metadata_database
from tests.support.gateway_calls import problem_type
from tests.support.push_subscriptions import HOSTS, INSIDE, RecordingLive, subscriptions_app

URL = "/internal/subscriptions"
HOOK = "https://hooks.example.com/petrel"


@pytest.fixture
def backend() -> str:
    return "sqlite"


@pytest.fixture
def database_url(backend: str, tmp_path: Path) -> Iterator[str]:
    with metadata_database(backend, tmp_path) as url:
        yield url


@pytest.fixture
def live() -> RecordingLive:
    return RecordingLive()


@pytest.fixture
def app_and_store(database_url: str, live: RecordingLive) -> tuple[FastAPI, SubscriptionStore]:
    return subscriptions_app(database_url, live)


@pytest.fixture
def store(app_and_store: tuple[FastAPI, SubscriptionStore]) -> SubscriptionStore:
    return app_and_store[1]


@pytest.fixture
async def push(app_and_store: tuple[FastAPI, SubscriptionStore]) -> AsyncIterator[httpx.AsyncClient]:
    async for client in in_process(app_and_store[0]):
        yield client


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_create_shows_the_secret_once_and_an_update_keeps_it(
    push: httpx.AsyncClient, live: RecordingLive, store: SubscriptionStore
) -> None:
    created = await push.put(f"{URL}/billing/orders", json={"endpoint_url": HOOK, "max_in_flight": 4})
    assert created.status_code == 201, created.text
    answer = created.json()
    secret = answer["signing_secret"]
    assert secret.startswith(SECRET_PREFIX)
    assert (answer["group"], answer["topic"], answer["endpoint_url"]) == ("billing", "orders", HOOK)
    assert (answer["max_in_flight"], answer["timeout_seconds"], answer["payload_format"]) == (
        4,
        15.0,
        "standard-webhooks",
    )
    assert (answer["paused"], answer["status"]["state"], answer["status"]["window"]) == (False, "active", 4)
    assert [s.key for s in live.applied] == [("billing", "orders")]

    shown = await push.get(f"{URL}/billing/orders")
    assert shown.status_code == 200, shown.text
    assert shown.json()["signing_secret"] is None

    filtered = {"endpoint_url": HOOK + "/v2", "filter": {"type": "SQL92", "expression": "amount > 10"}}
    updated = await push.put(f"{URL}/billing/orders", json=filtered)
    assert updated.status_code == 200, updated.text
    assert updated.json()["signing_secret"] is None
    assert updated.json()["filter"] == {"type": "SQL92", "expression": "amount > 10"}
    assert updated.json()["max_in_flight"] == 16
    assert store.get("billing", "orders").signing_secret == secret
    assert live.applied[-1].endpoint_url == HOOK + "/v2"


async def test_a_secret_given_in_a_put_is_shown_and_replaces_the_old_one(
    push: httpx.AsyncClient, store: SubscriptionStore
) -> None:
    await push.put(f"{URL}/billing/orders", json={"endpoint_url": HOOK})
    chosen = new_secret()
    updated = await push.put(f"{URL}/billing/orders", json={"endpoint_url": HOOK, "signing_secret": chosen})
    assert updated.status_code == 200, updated.text
    assert updated.json()["signing_secret"] == chosen
    assert store.get("billing", "orders").signing_secrets(int(time.time() * 1000)) == [chosen]

    bad = await push.put(f"{URL}/billing/orders", json={"endpoint_url": HOOK, "signing_secret": "hunter2"})
    assert bad.status_code == 400
    assert "signing_secret must start with 'whsec_'" in bad.json()["detail"]


async def test_list_by_group(push: httpx.AsyncClient) -> None:
    for group, topic in (("billing", "refunds"), ("audit", "orders"), ("billing", "orders")):
        assert (await push.put(f"{URL}/{group}/{topic}", json={"endpoint_url": HOOK})).status_code == 201

    everything = (await push.get(URL)).json()["subscriptions"]
    assert [(s["group"], s["topic"]) for s in everything] == [
        ("audit", "orders"),
        ("billing", "orders"),
        ("billing", "refunds"),
    ]
    assert all(s["signing_secret"] is None for s in everything)
    billing = (await push.get(URL, params={"group": "billing"})).json()["subscriptions"]
    assert [s["topic"] for s in billing] == ["orders", "refunds"]


async def test_pause_and_resume(push: httpx.AsyncClient, live: RecordingLive, store: SubscriptionStore) -> None:
    await push.put(f"{URL}/billing/orders", json={"endpoint_url": HOOK})

    paused = await push.post(f"{URL}/billing/orders/pause")
    assert paused.status_code == 200, paused.text
    assert (paused.json()["paused"], paused.json()["status"]["state"]) == (True, "paused")
    assert paused.json()["signing_secret"] is None
    assert live.applied[-1].paused

    again = await push.put(f"{URL}/billing/orders", json={"endpoint_url": HOOK})
    assert again.json()["paused"], "a PUT leaves a paused subscription paused"

    resumed = await push.post(f"{URL}/billing/orders/resume")
    assert (resumed.json()["paused"], resumed.json()["status"]["state"]) == (False, "active")
    assert not live.applied[-1].paused

    store.disable("billing", "orders", "the endpoint answered 410 Gone")
    disabled = (await push.get(f"{URL}/billing/orders")).json()
    assert (disabled["status"]["state"], disabled["disabled_reason"]) == ("disabled", "the endpoint answered 410 Gone")
    enabled = (await push.post(f"{URL}/billing/orders/resume")).json()
    assert (enabled["status"]["state"], enabled["disabled_reason"]) == ("active", None)


async def test_rotating_the_secret_signs_with_both_during_the_overlap(
    push: httpx.AsyncClient, live: RecordingLive, store: SubscriptionStore
) -> None:
    old = (await push.put(f"{URL}/billing/orders", json={"endpoint_url": HOOK})).json()["signing_secret"]
    before = int(time.time() * 1000)

    rotated = await push.post(f"{URL}/billing/orders/rotate-secret")  # no body: a day of overlap
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["signing_secret"]
    assert new.startswith(SECRET_PREFIX)
    assert new != old
    overlap_until = rotated.json()["secret_overlap_until"]
    assert before + 86_400_000 <= overlap_until <= int(time.time() * 1000) + 86_400_000
    stored = store.get("billing", "orders")
    assert stored.signing_secrets(overlap_until - 1) == [new, old]
    assert stored.signing_secrets(overlap_until) == [new]
    assert live.applied[-1].signing_secret == new

    shown = (await push.get(f"{URL}/billing/orders")).json()
    assert (shown["signing_secret"], shown["secret_overlap_until"]) == (None, overlap_until)

    at_once = await push.post(f"{URL}/billing/orders/rotate-secret", json={"overlap_seconds": 0})
    newest = at_once.json()["signing_secret"]
    assert newest not in (old, new)
    assert at_once.json()["secret_overlap_until"] is None
    assert store.get("billing", "orders").signing_secrets(int(time.time() * 1000)) == [newest]


async def test_delete_then_the_subscription_is_not_found(push: httpx.AsyncClient, live: RecordingLive) -> None:
    await push.put(f"{URL}/billing/orders", json={"endpoint_url": HOOK})

    deleted = await push.delete(f"{URL}/billing/orders")
    assert deleted.status_code == 204, deleted.text
    assert live.removed == [("billing", "orders")]

    for answer in (
        await push.get(f"{URL}/billing/orders"),
        await push.delete(f"{URL}/billing/orders"),
        await push.post(f"{URL}/billing/orders/pause"),
        await push.post(f"{URL}/billing/orders/rotate-secret"),
        await push.get(f"{URL}/billing/orders/attempts"),
    ):
        assert answer.status_code == 404, answer.text
        assert problem_type(answer) == "subscription-not-found"
        assert "group 'billing' has no push subscription to topic 'orders'" in answer.json()["detail"]
    assert live.removed == [("billing", "orders")]


@pytest.mark.parametrize(
    ("endpoint_url", "detail"),
    [
        (
            "ftp://hooks.example.com/",
            "endpoint_url 'ftp://hooks.example.com/' must be an http or https URL with a host",
        ),
        ("https://hooks.example.com:port/", "endpoint_url 'https://hooks.example.com:port/' is not a URL"),
        (
            "http://internal.example.com/hook",
            "endpoint_url 'http://internal.example.com/hook' is refused: internal.example.com does not resolve, "
            "or not only to public internet addresses; an operator allows other networks with "
            "PETREL_PUSH_ALLOWED_NETWORKS",
        ),
        ("http://split.example.com/", "split.example.com does not resolve, or not only to public internet addresses"),
        ("http://127.0.0.1:9000/", "127.0.0.1 is not a public internet address: Loopback (127.0.0.0/8, RFC 1122"),
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254 is not a public internet address: Link Local"),
        ("http://100.100.100.200/", "100.100.100.200 is not a public internet address: Shared Address Space"),
        ("http://[2002:a00:1::1]/", "2002:a00:1::1 is not a public internet address: it carries 10.0.0.1 (6to4"),
        ("https://nowhere.example.com/", "nowhere.example.com does not resolve, or not only to public internet"),
    ],
)
async def test_an_endpoint_that_is_not_http_or_inside_the_cluster_is_refused(
    push: httpx.AsyncClient, live: RecordingLive, endpoint_url: str, detail: str
) -> None:
    refused = await push.put(f"{URL}/billing/orders", json={"endpoint_url": endpoint_url})
    assert refused.status_code == 400, refused.text
    assert problem_type(refused) == "invalid-request"
    assert detail in refused.json()["detail"]
    assert live.applied == []
    assert (await push.get(f"{URL}/billing/orders")).status_code == 404


@pytest.mark.parametrize("host", sorted(INSIDE))
async def test_an_endpoint_whose_host_resolves_inside_is_refused_without_naming_the_address(
    push: httpx.AsyncClient, host: str
) -> None:
    refused = await push.put(f"{URL}/billing/orders", json={"endpoint_url": f"https://{host}/hook"})
    assert refused.status_code == 400, refused.text
    assert "does not resolve, or not only to public internet addresses" in refused.json()["detail"]
    assert not [address for address in HOSTS[host] if address in refused.text]


async def test_a_bad_filter_or_name_is_a_400(push: httpx.AsyncClient) -> None:
    bad_filter = {"endpoint_url": HOOK, "filter": {"type": "SQL92", "expression": "amount >"}}
    refused = await push.put(f"{URL}/billing/orders", json=bad_filter)
    assert refused.status_code == 400, refused.text
    assert problem_type(refused) == "invalid-filter"

    reserved = await push.put(f"{URL}/billing/%25DLQ%25billing", json={"endpoint_url": HOOK})
    assert problem_type(reserved) == "invalid-topic-name"


async def test_unknown_fields_and_out_of_range_values_are_refused_saying_which(push: httpx.AsyncClient) -> None:
    # A schema violation is the house's 422 validation-failed, naming the field (as every other body).
    for body, location in (
        ({"endpoint_url": HOOK, "colour": "red"}, "body.colour"),
        ({"endpoint_url": HOOK, "max_in_flight": 0}, "body.max_in_flight"),
        ({"max_in_flight": 3}, "body.endpoint_url"),
    ):
        refused = await push.put(f"{URL}/billing/orders", json=body)
        assert refused.status_code == 422, refused.text
        assert problem_type(refused) == "validation-failed"
        assert location in refused.json()["detail"]

    await push.put(f"{URL}/billing/orders", json={"endpoint_url": HOOK})
    rotation = await push.post(f"{URL}/billing/orders/rotate-secret", json={"overlap": 5})
    assert rotation.status_code == 422
    assert "body.overlap" in rotation.json()["detail"]


async def test_attempts_are_the_live_ones_up_to_the_limit(push: httpx.AsyncClient, live: RecordingLive) -> None:
    await push.put(f"{URL}/billing/orders", json={"endpoint_url": HOOK})
    live.recent = [
        PushAttempt(at=2, message_id="m2", delivery_attempt=1, outcome="throttled", status=429, latency_ms=3),
        PushAttempt(at=1, message_id="m1", delivery_attempt=1, outcome="acked", status=200, latency_ms=5),
    ]

    latest = await push.get(f"{URL}/billing/orders/attempts", params={"limit": 1})
    assert latest.status_code == 200, latest.text
    assert latest.json()["attempts"] == [
        {
            "at": 2,
            "message_id": "m2",
            "delivery_attempt": 1,
            "outcome": "throttled",
            "status": 429,
            "latency_ms": 3,
            "error": None,
        }
    ]
    assert len((await push.get(f"{URL}/billing/orders/attempts")).json()["attempts"]) == 2
    for limit in (0, 1001):
        assert (await push.get(f"{URL}/billing/orders/attempts", params={"limit": limit})).status_code == 422
