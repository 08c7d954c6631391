"""The broker's batch end (POST /internal/transactions:end): each end answered as its own call would be."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from libs.broker_api.transactions import EndBatchAnswer
from libs.names import TRANS_OP_HALF_TOPIC
from services.broker.app import create_app
from tests.support.apps import broker_settings, in_process
from tests.support.broker_calls import end, put_half, topic_records
from tests.support.serving import ServedApp


@pytest.fixture
async def broker(nameserver: ServedApp) -> AsyncIterator[httpx.AsyncClient]:
    async for client in in_process(create_app(broker_settings(nameserver, transaction_check_max=3))):
        await client.put("/internal/topics/orders", json={"read_queues": 2, "write_queues": 2})
        yield client


async def end_batch(client: httpx.AsyncClient, *ends: tuple[str, str]) -> list[dict[str, Any]]:
    body = {"ends": [{"message_id": m, "outcome": o, "by": "producer"} for m, o in ends]}
    answer = await client.post("/internal/transactions:end", json=body)
    assert answer.status_code == 200, answer.text
    results: list[dict[str, Any]] = answer.json()["results"]
    return results


async def test_a_batch_answers_each_end_as_its_own_call_would(broker: httpx.AsyncClient) -> None:
    for message_id in ("TXA", "TXB", "TXC"):
        await put_half(broker, message_id)
    assert (await end(broker, "TXC", "rollback")).status_code == 200

    results = await end_batch(
        broker,
        ("TXA", "COMMIT"),
        ("TXB", "ROLLBACK"),
        ("TXC", "COMMIT"),
        ("NOPE", "COMMIT"),
        ("TXA", "COMMIT"),
        ("TXB", "COMMIT"),
    )

    commit, rollback, conflict, unknown, repeat, late_conflict = results
    assert (commit["ended"]["first"], commit["ended"]["outcome"]) == (True, "COMMIT")
    assert (rollback["ended"]["first"], rollback["ended"]["queue_offset"]) == (True, None)
    assert conflict["failure"]["status"] == 409, "commit after rollback was not refused"
    assert conflict["failure"]["extensions"] == {"outcome": "ROLLBACK"}
    assert late_conflict["failure"]["extensions"] == {"outcome": "ROLLBACK"}, "the batch's own rollback was missed"
    assert unknown["failure"]["status"] == 404
    assert repeat["ended"]["first"] is False
    (delivered,) = await topic_records(broker, "orders", 1)
    assert delivered.message_id == "TXA"
    assert commit["ended"]["queue_offset"] == repeat["ended"]["queue_offset"] == delivered.queue_offset
    answered = EndBatchAnswer.model_validate({"results": results}).model_dump(mode="json")
    assert answered == {"results": results}, "the answer built by hand is not the EndBatchAnswer the spec names"
    ops = await topic_records(broker, TRANS_OP_HALF_TOPIC)
    assert len(ops) == 3, "one op record per first end: TXC's rollback, then TXA's and TXB's"


async def test_concurrent_commits_of_one_transaction_store_it_once(broker: httpx.AsyncClient) -> None:
    await put_half(broker, "TXD")

    async def batch() -> list[bool]:
        return [r["ended"]["first"] for r in await end_batch(broker, ("TXD", "COMMIT"), ("TXD", "COMMIT"))]

    async def single() -> list[bool]:
        return [(await end(broker, "TXD", "commit")).json()["first"]]

    answers = await asyncio.gather(*(batch() for _ in range(8)), *(single() for _ in range(8)))

    firsts = [first for answer in answers for first in answer]
    assert firsts.count(True) == 1, f"{firsts.count(True)} ends each claimed to be the first"
    assert [r.message_id for r in await topic_records(broker, "orders", 1)] == ["TXD"]
    assert len(await topic_records(broker, TRANS_OP_HALF_TOPIC)) == 1


async def test_a_batch_is_one_to_a_thousand_ends(broker: httpx.AsyncClient) -> None:
    empty = await broker.post("/internal/transactions:end", json={"ends": []})
    assert empty.status_code == 422, empty.text
    assert "at least 1 item" in empty.json()["detail"]
