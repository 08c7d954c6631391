"""`PUT` on a consumer group or a producer group changes only the fields it names; `If-None-Match: *` creates only."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.support.gateway_calls import problem_type

URL = "http://127.0.0.1:9/checkback"


async def settings_of(gateway: httpx.AsyncClient, group: str) -> dict[str, Any]:
    body = (await gateway.get(f"/v1/groups/{group}")).json()
    return {k: body[k] for k in ("max_retries", "fifo", "consume_from")}


async def test_a_group_put_changes_only_the_fields_it_names(gateway: httpx.AsyncClient) -> None:
    created = await gateway.put("/v1/groups/billing", json={"max_retries": 2, "fifo": True})
    assert created.status_code == 201, created.text
    nothing: tuple[dict[str, object] | None, ...] = (None, {})
    for body in nothing:
        again = await gateway.put("/v1/groups/billing", json=body)
        assert again.status_code == 200, again.text
        assert await settings_of(gateway, "billing") == {"max_retries": 2, "fifo": True, "consume_from": "first"}
    assert (await gateway.put("/v1/groups/billing", json={"consume_from": "last"})).status_code == 200
    assert await settings_of(gateway, "billing") == {"max_retries": 2, "fifo": True, "consume_from": "last"}
    # Explicit defaults are changes like any other.
    assert (await gateway.put("/v1/groups/billing", json={"max_retries": 16, "fifo": False})).status_code == 200
    assert await settings_of(gateway, "billing") == {"max_retries": 16, "fifo": False, "consume_from": "last"}


async def test_two_puts_at_once_of_different_fields_both_hold(gateway: httpx.AsyncClient) -> None:
    """Each broker merges the fields named under its own lock: a gateway that read the group first and
    wrote it whole would undo the other change (two operators, or two gateways, at once)."""
    assert (await gateway.put("/v1/groups/billing")).status_code == 201
    for retries in (3, 5, 7):
        consume_from = "last" if retries != 5 else "first"
        answers = await asyncio.gather(
            gateway.put("/v1/groups/billing", json={"max_retries": retries}),
            gateway.put("/v1/groups/billing", json={"consume_from": consume_from}),
        )
        assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
        expected = {"max_retries": retries, "fifo": False, "consume_from": consume_from}
        assert await settings_of(gateway, "billing") == expected


async def test_a_group_put_with_if_none_match_star_creates_only(gateway: httpx.AsyncClient) -> None:
    create_only = {"if-none-match": "*"}
    assert (await gateway.put("/v1/groups/billing", json={"max_retries": 3}, headers=create_only)).status_code == 201
    again = await gateway.put("/v1/groups/billing", json={"max_retries": 5}, headers=create_only)
    assert again.status_code == 412, again.text
    assert problem_type(again) == "already-exists"
    assert (await settings_of(gateway, "billing"))["max_retries"] == 3


async def test_a_producer_group_put_keeps_its_url_and_secret_unless_named(gateway: httpx.AsyncClient) -> None:
    created = await gateway.put("/v1/producer-groups/shop", json={"checkback_url": URL})
    assert created.status_code == 201, created.text
    secret = created.json()["signing_secret"]
    kept = await gateway.put("/v1/producer-groups/shop", json={})
    assert kept.status_code == 200, kept.text
    assert kept.json()["checkback_url"] == URL
    assert kept.json().get("signing_secret") is None, "a secret was shown again"
    moved = await gateway.put("/v1/producer-groups/shop", json={"checkback_url": URL + "/v2"})
    assert moved.json()["checkback_url"] == URL + "/v2"
    assert secret


@pytest.mark.parametrize("headers", [{}, {"if-none-match": "*"}])
async def test_a_new_producer_group_needs_its_checkback_url(
    gateway: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    answer = await gateway.put("/v1/producer-groups/shop", json={}, headers=headers)
    assert answer.status_code == 400, answer.text
    assert "checkback_url" in answer.json()["detail"]


async def test_a_producer_group_put_with_if_none_match_star_creates_only(gateway: httpx.AsyncClient) -> None:
    create_only = {"if-none-match": "*"}
    assert (
        await gateway.put("/v1/producer-groups/shop", json={"checkback_url": URL}, headers=create_only)
    ).status_code == 201
    again = await gateway.put("/v1/producer-groups/shop", json={"checkback_url": URL + "/v2"}, headers=create_only)
    assert again.status_code == 412, again.text
    assert problem_type(again) == "already-exists"
    assert (await gateway.get("/v1/producer-groups/shop")).json()["checkback_url"] == URL


async def test_a_broker_that_lacks_the_group_gets_it_as_the_others_hold_it(
    gateway: httpx.AsyncClient, brokers: dict[str, Any]
) -> None:
    """A broker added since the group was created: a PUT of one field creates the group there with the other
    brokers' settings, not the defaults."""
    async with brokers["broker-a"].client() as broker_a:
        held = {"max_retries": 2, "fifo": True}
        assert (await broker_a.put("/internal/groups/billing", json=held)).status_code == 200
    assert (await gateway.put("/v1/groups/billing", json={"consume_from": "last"})).status_code == 201

    for name in ("broker-a", "broker-b"):
        async with brokers[name].client() as broker:
            group = (await broker.get("/internal/groups/billing")).json()
        assert (group["max_retries"], group["fifo"], group["consume_from"]) == (2, True, "last"), f"{name}: {group}"
