"""API keys at the gateway: who may call what, keys made and revoked through the API, rates, refusals audited."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from gateway.app import create_app
from gateway.settings import GatewaySettings
from tests.support.api_keys import bearer, issue_key, key_store, make_key
from tests.support.exported_events import exported_events
from tests.support.serving import ServedApp
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio


@pytest.fixture
def admin_key(tmp_path: Path) -> str:
    return issue_key(tmp_path, "admin", "pub", "sub", name="root")


@pytest.fixture
def gateway_overrides(tmp_path: Path, admin_key: str) -> dict[str, Any]:
    """Auth on, keys in the test's own metadata database; the admin key exists before the gateway starts."""
    return {"auth": "required", "data_dir": tmp_path, "key_refresh_seconds": 0.05}


async def test_a_call_without_a_key_is_401_and_names_the_header(gateway: httpx.AsyncClient) -> None:
    answer = await gateway.post("/v1/topics/orders/messages", json={"body": "x"})
    assert answer.status_code == 401
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert "Authorization: Bearer" in answer.json()["detail"]
    assert (await gateway.get("/v1/nowhere")).status_code == 401  # unknown paths too: nothing is learnt without a key
    assert (await gateway.get("/healthz")).status_code == 200


@pytest.mark.parametrize(
    "header",
    ["Basic dXNlcjpwYXNz", "Bearer not-a-key", "Bearer ptk_0123456789ab_" + "A" * 43],
    ids=["basic", "malformed", "forged"],
)
async def test_forged_and_malformed_keys_are_401(gateway: httpx.AsyncClient, header: str) -> None:
    answer = await gateway.get("/v1/topics", headers={"authorization": header})
    assert answer.status_code == 401
    assert answer.json()["type"].endswith("/unauthorized")


async def test_a_key_with_a_wrong_secret_is_401(gateway: httpx.AsyncClient, admin_key: str) -> None:
    forged = admin_key[:-4] + ("AAAA" if not admin_key.endswith("AAAA") else "BBBB")
    assert (await gateway.get("/v1/topics", headers=bearer(forged))).status_code == 401
    assert (await gateway.get("/v1/topics", headers=bearer(admin_key))).status_code == 200


async def test_permissions_follow_name_patterns_and_deny_beats_allow(
    gateway: httpx.AsyncClient, tmp_path: Path, admin_key: str
) -> None:
    for topic in ("orders-eu", "orders-secret", "billing"):
        assert (await gateway.put(f"/v1/topics/{topic}", headers=bearer(admin_key))).status_code in (200, 201)
    producer = await make_key(gateway, admin_key, "pub:orders*", deny=("pub:orders-secret",))
    assert (
        await gateway.post("/v1/topics/orders-eu/messages", json={"body": "a"}, headers=producer)
    ).status_code == 201
    denied = await gateway.post("/v1/topics/orders-secret/messages", json={"body": "b"}, headers=producer)
    assert denied.status_code == 403
    assert "deny grant pub:orders-secret" in denied.json()["detail"]
    other = await gateway.post("/v1/topics/billing/messages", json={"body": "c"}, headers=producer)
    assert other.status_code == 403
    assert other.json()["required"] == ["pub:topic/billing"]
    # publishing does not let it read, and the listing shows only what it holds grants on
    assert (await gateway.get("/v1/topics/orders-eu/queues/0/messages", headers=producer)).status_code == 403
    listed = await gateway.get("/v1/topics", headers=producer)
    assert sorted(t["topic"] for t in listed.json()["topics"]) == ["orders-eu"]  # denied ones are not listed


async def test_receiving_needs_subscribe_on_both_group_and_topic(
    gateway: httpx.AsyncClient, tmp_path: Path, admin_key: str
) -> None:
    assert (await gateway.put("/v1/groups/billing", json={}, headers=bearer(admin_key))).status_code in (200, 201)
    await gateway.put("/v1/topics/orders", headers=bearer(admin_key))
    group_only = await make_key(gateway, admin_key, "sub:group/billing")
    both = await make_key(gateway, admin_key, "sub:group/billing", "sub:topic/orders")
    body = {"max_messages": 1, "wait_seconds": 0}
    refused = await gateway.post("/v1/groups/billing/topics/orders/receive", json=body, headers=group_only)
    assert refused.status_code == 403
    assert refused.json()["required"] == ["sub:topic/orders"]
    accepted = await gateway.post("/v1/groups/billing/topics/orders/receive", json=body, headers=both)
    assert accepted.status_code == 200


async def test_keys_made_through_the_api_work_at_once_and_revoked_ones_stop_at_once(
    gateway: httpx.AsyncClient, admin_key: str
) -> None:
    made = await gateway.post("/v1/keys", json={"name": "ci-bot", "allow": ["pub:ci-*"]}, headers=bearer(admin_key))
    assert made.status_code == 201
    key, key_id = made.json()["key"], made.json()["key_id"]
    assert (
        await gateway.post("/v1/topics/ci-runs/messages", json={"body": "x"}, headers=bearer(key))
    ).status_code == 201
    listed = (await gateway.get("/v1/keys", headers=bearer(admin_key))).json()["keys"]
    assert [k["name"] for k in listed if k["key_id"] == key_id] == ["ci-bot"]
    assert all("key" not in k and "secret_hash" not in k for k in listed)
    assert (await gateway.delete(f"/v1/keys/{key_id}", headers=bearer(admin_key))).status_code == 204
    gone = await gateway.post("/v1/topics/ci-runs/messages", json={"body": "y"}, headers=bearer(key))
    assert gone.status_code == 401
    assert "revoked" in gone.json()["detail"]
    # only an unrestricted admin manages keys
    narrow_admin = (
        await gateway.post("/v1/keys", json={"name": "ops", "allow": ["admin:orders*"]}, headers=bearer(admin_key))
    ).json()["key"]
    assert (await gateway.get("/v1/keys", headers=bearer(narrow_admin))).status_code == 403


async def test_a_revocation_elsewhere_reaches_this_gateway_within_its_refresh(
    gateway: httpx.AsyncClient, tmp_path: Path
) -> None:
    key = issue_key(tmp_path, "sub")  # made before the gateway's refresh saw it: picked up by the next one

    async def works() -> bool:
        return (await gateway.get("/v1/groups", headers=bearer(key))).status_code == 200

    await eventually(works, "a key made by petrel keys works on a running gateway", timeout=5)
    store = key_store(tmp_path)
    store.revoke(key.split("_")[1])
    store.engine.dispose()

    async def refused() -> bool:
        return (await gateway.get("/v1/groups", headers=bearer(key))).status_code == 401

    await eventually(refused, "a key revoked by petrel keys is refused", timeout=5)


async def test_a_key_over_its_rate_gets_429_with_retry_after(gateway: httpx.AsyncClient, admin_key: str) -> None:
    key = await make_key(gateway, admin_key, "admin", rate=3)
    answers = [await gateway.get("/v1/groups", headers=key) for _ in range(12)]
    limited = [a for a in answers if a.status_code == 429]
    assert limited, [a.status_code for a in answers]
    assert int(limited[0].headers["retry-after"]) >= 1
    assert limited[0].json()["type"].endswith("/rate-limited")


async def test_refusals_and_admin_calls_are_audited(gateway: httpx.AsyncClient, tmp_path: Path, admin_key: str) -> None:
    await gateway.get("/v1/topics")
    reader = await make_key(gateway, admin_key, "sub:nothing")
    await gateway.delete("/v1/topics/orders", headers=reader)
    await gateway.put("/v1/topics/audited", headers=bearer(admin_key))

    def audit() -> list[dict[str, Any]]:
        return [e for e in exported_events(tmp_path) if e["event"] == "audit"]

    async def written() -> bool:
        seen = {(e["action"], e.get("operation")) for e in audit()}
        return {("unauthorized", None), ("forbidden", "deleteTopic"), ("admin_call", "putTopic")} <= seen

    await eventually(written, "audit events of a 401, a 403 and an admin call", timeout=5)
    by_action = {e["action"]: e for e in audit() if e.get("operation") != "createKey"}  # make_key's own call
    assert by_action["unauthorized"]["status"] == 401
    assert by_action["unauthorized"]["path"] == "/v1/topics"
    assert by_action["forbidden"]["operation"] == "deleteTopic"
    assert by_action["forbidden"]["key_name"] == "test"
    assert by_action["admin_call"]["operation"] == "putTopic"
    assert by_action["admin_call"]["status"] in (200, 201)


async def test_auth_off_on_an_address_others_reach_refuses_to_start(nameserver: ServedApp) -> None:
    with pytest.raises(ValueError, match="INSECURE_NO_AUTH"):
        create_app(GatewaySettings(host="0.0.0.0", auth="off", nameservers=[nameserver.address]))
    token = SecretStr("cluster-secret-of-thirty-two-bytes")  # off loopback a gateway needs the cluster token too
    create_app(GatewaySettings(host="0.0.0.0", auth="off", insecure_no_auth=True, internal_token=token))
    assert GatewaySettings(host="0.0.0.0").auth_required()
    assert not GatewaySettings(host="127.0.0.1").auth_required()
