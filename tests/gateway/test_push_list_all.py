"""`GET /v1/subscriptions`: every group's push subscriptions in one call, only those of groups the key administers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp

from libs.http.asgi import running
from tests.support.api_keys import bearer, issue_key, make_key
from tests.support.push_subscriptions import RecordingLive, subscriptions_app
from tests.support.serving import free_port

HOOK = "https://hooks.example.com/petrel"


@pytest.fixture
def admin_key(tmp_path: Path) -> str:
    return issue_key(tmp_path, "admin", "pub", "sub", name="root")


@pytest.fixture
def push_address() -> str:
    return f"127.0.0.1:{free_port()}"


@pytest.fixture
def gateway_overrides(tmp_path: Path, admin_key: str, push_address: str) -> dict[str, Any]:
    return {"auth": "required", "data_dir": tmp_path, "push_address": push_address}


@pytest.fixture
async def push_service(push_address: str, in_process_apps: dict[str, ASGIApp], tmp_path: Path) -> AsyncIterator[None]:
    """The push service's subscriptions API at `push_address`, in-process."""
    app, _ = subscriptions_app(f"sqlite:///{tmp_path / 'push.db'}", RecordingLive())
    async with running(app) as started:
        in_process_apps[push_address] = started
        yield


@pytest.mark.usefixtures("push_service")
async def test_every_groups_subscriptions_in_one_list_as_far_as_the_key_administers_them(
    gateway: httpx.AsyncClient, admin_key: str
) -> None:
    admin = bearer(admin_key)
    for topic in ("orders", "refunds"):
        assert (await gateway.put(f"/v1/topics/{topic}", headers=admin)).status_code == 201
    wanted = [("billing", "orders"), ("billing", "refunds"), ("shipping", "orders")]
    for group, topic in wanted:
        await gateway.put(f"/v1/groups/{group}", json={}, headers=admin)
        put = await gateway.put(f"/v1/groups/{group}/subscriptions/{topic}", json={"endpoint_url": HOOK}, headers=admin)
        assert put.status_code == 201, put.text
    assert (await gateway.put("/v1/groups/idle", json={}, headers=admin)).status_code == 201

    every = await gateway.get("/v1/subscriptions", headers=admin)
    assert every.status_code == 200, every.text
    assert [(s["group"], s["topic"]) for s in every.json()["subscriptions"]] == wanted
    assert all(s["status"]["state"] == "active" and s["signing_secret"] is None for s in every.json()["subscriptions"])
    per_group = (await gateway.get("/v1/groups/billing/subscriptions", headers=admin)).json()["subscriptions"]
    assert every.json()["subscriptions"][:2] == per_group

    billing_only = await make_key(gateway, admin_key, "admin:group/billing")
    mine = (await gateway.get("/v1/subscriptions", headers=billing_only)).json()["subscriptions"]
    assert [(s["group"], s["topic"]) for s in mine] == wanted[:2]
    reader = await make_key(gateway, admin_key, "sub")
    assert (await gateway.get("/v1/subscriptions", headers=reader)).status_code == 403
