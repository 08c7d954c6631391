"""`GET /v1/transactions`: open and abandoned transactions listed from every broker, a page at a time."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.gateway_transactions import begin, end, half_copies, visible
from tests.support.serving import ServedApp


@pytest.fixture
def broker_overrides() -> dict[str, Any]:
    """Brokers that abandon a transaction at its first check, so abandoning one takes one call."""
    return {"transaction_check_max": 1}


async def checked(broker: ServedApp, message_id: str, *, defer: bool = False) -> str:
    """What txcheck does after a check: the broker renews the half copy, or past the limit (1 here) abandons it.

    `defer`: renewed without counting a check (a copy still immune to checks). The state it leaves.
    """
    copy = max((c for c in await half_copies(broker) if c.message_id == message_id), key=lambda c: c.physical_offset)
    async with httpx.AsyncClient() as client:
        answer = await client.post(
            f"{broker.url}/internal/transactions/{message_id}/checked",
            json={"physical_offset": copy.physical_offset, "defer": defer},
        )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["state"])


async def abandon(broker: ServedApp, message_id: str) -> None:
    assert await checked(broker, message_id) == "ABANDONED"


async def listed(gateway: httpx.AsyncClient, state: str, **params: Any) -> list[str]:
    """Every page of transactions in `state`, following next_after; their ids in the order given."""
    ids: list[str] = []
    after = ""
    while True:
        answer = await gateway.get("/v1/transactions", params={"state": state, "after": after, **params})
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert page["unavailable"] == []
        assert all(t["state"] == state.upper() for t in page["transactions"])
        ids += [t["transaction_id"] for t in page["transactions"]]
        if page["next_after"] is None:
            return ids
        after = page["next_after"]


async def test_open_transactions_are_listed_until_they_end_or_are_abandoned(
    gateway: httpx.AsyncClient, brokers: dict[str, ServedApp]
) -> None:
    sent = [await begin(gateway, body=f"order {i}") for i in range(17)]  # a round over every queue
    ids = [tx["transaction_id"] for tx in sent]
    assert len({tx["broker"] for tx in sent}) == 2, "the half messages should span both brokers"
    assert await listed(gateway, "open") == sorted(ids)

    assert (await end(gateway, ids[0], "commit")).status_code == 200
    assert (await end(gateway, ids[1], "rollback")).status_code == 200
    await abandon(brokers[sent[2]["broker"]], sent[2]["message_id"])
    for _ in range(2):  # renewed twice: three half copies, still one open transaction
        assert await checked(brokers[sent[3]["broker"]], sent[3]["message_id"], defer=True) == "OPEN"
    assert await listed(gateway, "open") == sorted(ids[3:])
    assert await listed(gateway, "abandoned") == [ids[2]]


async def test_open_transactions_come_a_page_at_a_time_each_once(gateway: httpx.AsyncClient) -> None:
    ids = sorted([(await begin(gateway, body=f"order {i}"))["transaction_id"] for i in range(7)])
    first = (await gateway.get("/v1/transactions", params={"state": "open", "max": 3})).json()
    assert [t["transaction_id"] for t in first["transactions"]] == ids[:3]
    assert first["next_after"] == ids[2]
    assert await listed(gateway, "open", max=3) == ids
    assert await listed(gateway, "open", max=7) == ids


async def test_abandoned_transactions_are_listed_and_an_operator_can_still_end_them(
    gateway: httpx.AsyncClient, brokers: dict[str, ServedApp]
) -> None:
    sent = [await begin(gateway) for _ in range(3)]
    for tx in sent[:2]:
        await abandon(brokers[tx["broker"]], tx["message_id"])

    answer = await gateway.get("/v1/transactions", params={"state": "abandoned"})
    assert answer.status_code == 200, answer.text
    abandoned = {t["transaction_id"]: t for t in answer.json()["transactions"]}
    assert set(abandoned) == {tx["transaction_id"] for tx in sent[:2]}
    assert all(t["state"] == "ABANDONED" and t["check_count"] == 1 for t in abandoned.values())
    assert answer.json()["unavailable"] == []

    committed = await end(gateway, sent[0]["transaction_id"], "commit", by="operator")
    assert committed.status_code == 200, committed.text
    assert await visible(gateway, "orders") == [sent[0]["message_id"]]
    assert await listed(gateway, "abandoned") == [sent[1]["transaction_id"]]


@pytest.mark.parametrize(
    "params", [{}, {"state": "committed"}, {"state": "open", "max": 0}, {"state": "abandoned", "max": 1001}]
)
async def test_a_list_without_a_listable_state_or_with_a_bad_max_is_422(
    gateway: httpx.AsyncClient, params: dict[str, str | int]
) -> None:
    answer = await gateway.get("/v1/transactions", params=params)
    assert answer.status_code == 422, answer.text
