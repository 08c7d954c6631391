"""Keys made through `POST /v1/keys` are never wider than the key that makes them (issue 25, finding 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.api_keys import bearer, issue_key, key_store

pytestmark = pytest.mark.asyncio


@pytest.fixture
def auth() -> str:
    return "required"


@pytest.fixture
def gateway_overrides(tmp_path: Path, auth: str) -> dict[str, Any]:
    """Auth on; the refresh is slow, so a revocation made in the database is not seen before the next call."""
    return {"auth": auth, "data_dir": tmp_path, "key_refresh_seconds": 3600}


async def create(gateway: httpx.AsyncClient, maker: str, *allow: str, **spec: Any) -> httpx.Response:
    return await gateway.post("/v1/keys", json={"name": "made", "allow": list(allow)} | spec, headers=bearer(maker))


def refused_as_wider(answer: httpx.Response, grant: str) -> dict[str, Any]:
    assert answer.status_code == 403, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = answer.json()
    assert problem["type"].endswith("/forbidden")
    assert problem["grant"] == grant
    assert f"{grant} is wider" in problem["detail"]
    return problem


async def test_an_admin_with_denies_cannot_mint_the_pub_and_sub_it_is_denied(
    gateway: httpx.AsyncClient, tmp_path: Path
) -> None:
    maker = issue_key(tmp_path, "admin", deny=("admin:topic/payroll*", "pub", "sub"), name="ops")
    problem = refused_as_wider(await create(gateway, maker, "admin", "pub", "sub"), "pub")
    assert problem["maker_allow"] == []  # the maker's allow grants of the action: none
    assert "holds no pub grant" in problem["detail"]
    listed = (await gateway.get("/v1/keys", headers=bearer(maker))).json()["keys"]
    assert [k["name"] for k in listed] == ["ops"]  # nothing was stored

    made = await create(gateway, maker, "admin")
    assert made.status_code == 201, made.text
    assert made.json()["deny"] == ["admin:topic/payroll*", "pub", "sub"]  # the maker's denies, copied
    child = bearer(made.json()["key"])
    assert (await gateway.put("/v1/topics/orders", headers=child)).status_code in (200, 201)
    payroll = await gateway.put("/v1/topics/payroll-2026", headers=child)
    assert payroll.status_code == 403
    assert "deny grant admin:topic/payroll*" in payroll.json()["detail"]
    assert (await gateway.post("/v1/topics/orders/messages", json={"body": "x"}, headers=child)).status_code == 403


@pytest.mark.parametrize(
    ("grant", "allowed"),
    [
        ("pub:orders*", True),
        ("pub:orders-eu*", True),
        ("pub:orders-eu", True),
        ("pub:topic/orders?", True),
        ("pub:ord*", False),
        ("pub:*orders", False),
        ("pub", False),
        ("pub:group/billing", True),  # covered by the maker's pub:group/billing
        ("pub:billing", False),  # topics and groups: the maker has it on groups only
        ("sub:orders-eu", False),  # another action
        ("admin:topic/x", True),
    ],
)
async def test_each_allow_must_lie_within_one_of_the_makers(
    gateway: httpx.AsyncClient, tmp_path: Path, grant: str, allowed: bool
) -> None:
    maker = issue_key(tmp_path, "admin", "pub:orders*", "pub:group/billing", name="ops")
    answer = await create(gateway, maker, grant)
    if allowed:
        assert answer.status_code == 201, answer.text
    else:
        problem = refused_as_wider(answer, grant)
        assert problem["maker_allow"] == [g for g in ("pub:orders*", "pub:group/billing") if g[:3] == grant[:3]]


@pytest.mark.parametrize(
    ("asked", "status", "given"),
    [(None, 201, 10.0), (5, 201, 5.0), (10, 201, 10.0), (11, 403, None), (0, 403, None)],
)
async def test_a_key_made_by_a_rate_limited_key_has_at_most_its_rate(
    gateway: httpx.AsyncClient, tmp_path: Path, asked: float | None, status: int, given: float | None
) -> None:
    maker = issue_key(tmp_path, "admin", rate=10, name="ops")
    answer = await create(gateway, maker, "admin:orders*", rate_per_second=asked)
    assert answer.status_code == status, answer.text
    if given is not None:
        assert answer.json()["rate_per_second"] == given
    else:
        assert "rate" in answer.json()["detail"]


async def test_a_revoked_maker_mints_nothing_even_before_this_gateway_hears_of_it(
    gateway: httpx.AsyncClient, tmp_path: Path
) -> None:
    maker = issue_key(tmp_path, "admin", name="ops")
    assert (await gateway.get("/v1/keys", headers=bearer(maker))).status_code == 200  # known to the gateway
    store = key_store(tmp_path)
    store.revoke(maker.split("_")[1])  # elsewhere: this gateway refreshes in an hour
    store.engine.dispose()
    answer = await create(gateway, maker, "admin")
    assert answer.status_code == 401, answer.text
    assert "revoked" in answer.json()["detail"]
    listed = key_store(tmp_path)
    try:
        assert [k.name for k in listed.list_keys()] == ["ops"]
    finally:
        listed.engine.dispose()


async def test_revoking_a_maker_leaves_the_keys_it_made(gateway: httpx.AsyncClient, tmp_path: Path) -> None:
    root = issue_key(tmp_path, "admin", "pub", name="root")
    maker = (await create(gateway, root, "admin", "pub")).json()
    child = (await create(gateway, maker["key"], "pub:orders*")).json()
    assert child["created_by"] == f"key {maker['key_id']}"
    assert (await gateway.delete(f"/v1/keys/{maker['key_id']}", headers=bearer(root))).status_code == 204
    sent = await gateway.post("/v1/topics/orders/messages", json={"body": "x"}, headers=bearer(child["key"]))
    assert sent.status_code == 201, sent.text


@pytest.mark.parametrize("auth", ["off"])
async def test_with_auth_off_keys_are_made_as_asked(gateway: httpx.AsyncClient) -> None:
    answer = await gateway.post(
        "/v1/keys", json={"name": "any", "allow": ["admin", "pub", "sub"], "rate_per_second": 0}
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["allow"] == ["admin", "pub", "sub"]
    assert answer.json()["created_by"] == "gateway (auth off)"
