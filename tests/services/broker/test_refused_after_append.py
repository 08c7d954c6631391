"""A SYNC_MASTER's put refused after its records were appended says so: `maybe_stored`, and where they are.

The lease can run out, or an in-sync slave fail to confirm, while a put waits: the records
are in the CommitLog by then, so the refusal (409 not-master, 503 replication-timeout) names
the broker and the stored entries, and a flush timeout waits for the slaves and the lease too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from libs.broker_api.replication import BrokerRole
from libs.codec import encode_record
from libs.message import MessageRecord, Prop
from libs.store.config import FlushMode
from services.broker.app import create_app
from services.broker.context import BrokerContext
from tests.support.apps import broker_settings, in_process_with_state
from tests.support.broker_calls import topic_records
from tests.support.disk import stalled_disk
from tests.support.serving import ServedApp


@pytest.fixture
async def master(nameserver: ServedApp) -> AsyncIterator[tuple[httpx.AsyncClient, BrokerContext]]:
    settings = broker_settings(
        nameserver,
        role=BrokerRole.SYNC_MASTER,
        sync_replication_timeout_ms=100,
        flush_mode=FlushMode.SYNC_FLUSH,
        sync_flush_timeout_ms=100,
    )
    async for client, state in in_process_with_state(create_app(settings)):
        assert (await client.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})).is_success
        yield client, state["broker"]


def lose_the_lease(ctx: BrokerContext) -> None:
    """The lease runs out while a put waits: it was let in (the fence at the door is not set), then refused."""
    ctx.replication.fence(lambda: False)


def a_slave_that_never_confirms(ctx: BrokerContext) -> None:
    """Slave 1 is in sync at the log's start, then says nothing more; the controller will not take it out."""
    in_sync = ctx.replication.in_sync
    assert in_sync is not None

    async def refused(kept: list[int]) -> bool:
        return False

    in_sync.acked(1, "127.0.0.1:1", 0, master_end=0)
    in_sync.confirm = refused


async def put(broker: httpx.AsyncClient, *message_ids: str) -> httpx.Response:
    raw = b"".join(
        encode_record(MessageRecord(topic="orders", body=b"pay", queue_id=0, properties={Prop.UNIQ_KEY: m}))
        for m in message_ids
    )
    return await broker.post("/internal/messages", headers={"content-type": "application/octet-stream"}, content=raw)


def where(problem: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(s["message_id"], s["topic"], s["queue_offset"]) for s in problem["stored"]]


async def test_a_put_whose_lease_ran_out_after_the_append_is_not_master_and_maybe_stored(
    master: tuple[httpx.AsyncClient, BrokerContext],
) -> None:
    broker, ctx = master
    lose_the_lease(ctx)
    answer = await put(broker, "M1", "M2")

    assert answer.status_code == 409, answer.text
    problem = answer.json()
    assert problem["type"].endswith("/not-master")
    assert (problem["maybe_stored"], problem["broker"]) == (True, "broker-a")
    assert where(problem) == [("M1", "orders", 0), ("M2", "orders", 1)]
    assert [r.message_id for r in await topic_records(broker, "orders")] == ["M1", "M2"], "they are in the log"


async def test_a_put_an_in_sync_slave_did_not_confirm_is_a_replication_timeout_and_maybe_stored(
    master: tuple[httpx.AsyncClient, BrokerContext],
) -> None:
    broker, ctx = master
    a_slave_that_never_confirms(ctx)
    answer = await put(broker, "M1")

    assert answer.status_code == 503, answer.text
    problem = answer.json()
    assert problem["type"].endswith("/replication-timeout")
    assert (problem["maybe_stored"], problem["broker"]) == (True, "broker-a")
    assert where(problem) == [("M1", "orders", 0)]


async def test_a_flush_timeout_still_checks_the_lease_before_it_is_answered(
    master: tuple[httpx.AsyncClient, BrokerContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, ctx = master
    lose_the_lease(ctx)
    with stalled_disk(monkeypatch) as disk:
        answer = await put(broker, "M1")
        disk.set()

    assert answer.status_code == 409, answer.text  # not 200 "stored, not durable": this master may be replaced
    problem = answer.json()
    assert problem["type"].endswith("/not-master")
    assert (problem["maybe_stored"], problem["broker"]) == (True, "broker-a")
    assert where(problem) == [("M1", "orders", 0)]


async def test_a_flush_timeout_still_waits_for_the_in_sync_slaves(
    master: tuple[httpx.AsyncClient, BrokerContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, ctx = master
    a_slave_that_never_confirms(ctx)
    with stalled_disk(monkeypatch) as disk:
        answer = await put(broker, "M1")
        disk.set()

    assert answer.status_code == 503, answer.text
    problem = answer.json()
    assert problem["type"].endswith("/replication-timeout")
    assert (problem["maybe_stored"], where(problem)) == (True, [("M1", "orders", 0)])
