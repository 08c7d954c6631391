"""Transaction ids carry where the half message is (issue 29): ids of either form end, look up and list alike."""

from __future__ import annotations

import httpx

from tests.support.gateway_transactions import begin, end, visible


async def test_an_id_handed_out_before_ids_carried_offsets_still_ends_its_transaction(
    gateway: httpx.AsyncClient,
) -> None:
    sent = await begin(gateway)
    old_form = f"{sent['broker']}:{sent['message_id']}"
    assert sent["transaction_id"] != old_form

    state = await gateway.get(f"/v1/transactions/{old_form}")
    committed = await end(gateway, old_form, "commit")
    again = await end(gateway, sent["transaction_id"], "commit")

    assert state.status_code == 200, state.text
    assert state.json()["transaction_id"] == sent["transaction_id"], "a transaction is shown by one id"
    assert committed.status_code == 200, committed.text
    assert committed.json()["transaction_id"] == old_form, "the answer names the transaction as asked"
    assert (committed.json()["first"], again.json()["first"]) == (True, False)
    assert await visible(gateway, "orders") == [sent["message_id"]]


async def test_an_id_whose_offset_is_another_transactions_ends_its_own(gateway: httpx.AsyncClient) -> None:
    mine, other = await begin(gateway), await begin(gateway)
    _, _, other_offset = other["transaction_id"].rpartition(".")
    crossed = f"{mine['broker']}:{mine['message_id']}.{other_offset}"

    committed = await end(gateway, crossed, "commit")

    assert committed.status_code == 200, committed.text
    assert await visible(gateway, "orders") == [mine["message_id"]]
    assert (await gateway.get(f"/v1/transactions/{other['transaction_id']}")).json()["state"] == "OPEN"


async def test_open_transactions_are_listed_by_the_id_their_send_answered(gateway: httpx.AsyncClient) -> None:
    sent = [await begin(gateway) for _ in range(3)]
    listed = await gateway.get("/v1/transactions", params={"state": "open"})
    assert listed.status_code == 200, listed.text
    assert sorted(t["transaction_id"] for t in listed.json()["transactions"]) == sorted(
        s["transaction_id"] for s in sent
    )
