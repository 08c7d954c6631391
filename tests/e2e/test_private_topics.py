"""A scheduled message is invisible until it is due, then found in its own topic (real processes)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e


async def test_a_scheduled_message_is_found_by_id_in_its_topic_once_due(
    shared_gateway: httpx.AsyncClient, unique: Callable[[str], str]
) -> None:
    gateway, later, key = shared_gateway, unique("later"), unique("k1")
    assert (await gateway.put(f"/v1/topics/{later}", json={"queues": 1})).status_code == 201
    sent = await gateway.post(f"/v1/topics/{later}/messages", json={"body": "soon", "keys": [key], "delay_ms": 1500})
    assert sent.status_code == 201, sent.text
    message_id, due = sent.json()["message_id"], sent.json()["deliver_at"]

    early = await gateway.get(f"/v1/messages/{message_id}")
    assert early.status_code == 404, f"a scheduled message was visible before it was due: {early.text}"

    async def found() -> bool:
        return (await gateway.get(f"/v1/messages/{message_id}")).status_code == 200

    await eventually(found, "the scheduled message found by id once due", timeout=15)
    message = (await gateway.get(f"/v1/messages/{message_id}")).json()
    assert (message["topic"], message["queue_offset"], message["body"]) == (later, 0, "soon")
    assert message["stored_at"] >= due
    by_key = (await gateway.get(f"/v1/topics/{later}/messages", params={"key": key})).json()["messages"]
    assert [m["message_id"] for m in by_key] == [message_id]
