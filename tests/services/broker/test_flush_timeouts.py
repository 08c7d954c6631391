"""The broker's put and transaction ends on a disk that stops confirming syncs (SYNC_FLUSH), and DEDUP puts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from libs.codec import encode_record
from libs.message import MessageRecord, Prop
from libs.store.config import FlushMode
from services.broker.app import create_app
from tests.support.apps import broker_settings, in_process
from tests.support.broker_calls import end, put_half, topic_records
from tests.support.disk import stalled_disk
from tests.support.serving import ServedApp


@pytest.fixture
async def broker(nameserver: ServedApp) -> AsyncIterator[httpx.AsyncClient]:
    settings = broker_settings(nameserver, flush_mode=FlushMode.SYNC_FLUSH, sync_flush_timeout_ms=100)
    async for client in in_process(create_app(settings)):
        await client.put("/internal/topics/orders", json={"read_queues": 2, "write_queues": 2})
        yield client


def record(message_id: str, body: str = "pay", **properties: str) -> bytes:
    props = {Prop.UNIQ_KEY: message_id} | properties
    return encode_record(MessageRecord(topic="orders", body=body.encode(), queue_id=0, properties=props))


async def put(broker: httpx.AsyncClient, raw: bytes) -> dict[str, Any]:
    answer = await broker.post("/internal/messages", headers={"content-type": "application/octet-stream"}, content=raw)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_a_put_whose_sync_timed_out_is_answered_as_stored_not_as_an_error(
    broker: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    with stalled_disk(monkeypatch) as disk:
        answer = await put(broker, record("M1") + record("M2"))
        disk.set()

    assert [s["message_id"] for s in answer["stored"]] == ["M1", "M2"]
    assert [s["queue_offset"] for s in answer["stored"]] == [0, 1]
    assert answer["failure"] is None
    assert "did not confirm the write within 100 ms" in answer["not_durable"]
    assert [r.message_id for r in await topic_records(broker, "orders")] == ["M1", "M2"]


async def test_a_dedup_record_put_again_is_answered_with_the_first_copy(broker: httpx.AsyncClient) -> None:
    first = (await put(broker, record("M1", **{Prop.DEDUP: "true"})))["stored"][0]
    again = (await put(broker, record("M1", "pay again", **{Prop.DEDUP: "true"})))["stored"][0]
    plain = [(await put(broker, record("M2")))["stored"][0] for _ in range(2)]

    assert (again["queue_offset"], again["physical_offset"]) == (first["queue_offset"], first["physical_offset"])
    assert [p["queue_offset"] for p in plain] == [1, 2], "a record without DEDUP is stored each time"
    assert [(r.message_id, r.body) for r in await topic_records(broker, "orders")] == [
        ("M1", b"pay"),
        ("M2", b"pay"),
        ("M2", b"pay"),
    ]


async def test_a_dedup_record_put_twice_in_one_batch_is_stored_once(broker: httpx.AsyncClient) -> None:
    twice = record("M1", **{Prop.DEDUP: "true"}) * 2
    stored = (await put(broker, twice))["stored"]

    assert stored[0]["physical_offset"] == stored[1]["physical_offset"]
    assert len(await topic_records(broker, "orders")) == 1


async def test_a_commit_whose_op_record_timed_out_stands_and_a_rollback_is_refused(
    broker: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await put_half(broker, "TX1")
    with stalled_disk(monkeypatch) as disk:
        commit = await end(broker, "TX1", "commit")
        disk.set()
    assert commit.status_code == 503, commit.text
    assert commit.json()["type"].endswith("/flush-timeout")
    assert commit.json()["outcome"] == "COMMIT"

    rollback = await end(broker, "TX1", "rollback")
    again = await end(broker, "TX1", "commit")

    assert rollback.status_code == 409, rollback.text
    assert rollback.json()["outcome"] == "COMMIT"
    assert again.status_code == 200, again.text
    assert again.json()["first"] is False
    assert [r.message_id for r in await topic_records(broker, "orders", 1)] == ["TX1"]
