"""A retry, dead-letter or redriven copy whose put the disk did not confirm in time is stored once.

Under SYNC_FLUSH a put whose sync timed out is stored (in the CommitLog, read by
everyone), only not confirmed durable: the consume side counts it as stored and
never puts it again, while a put that stored nothing leaves the message in place
as before. Each failed attempt's copy carries its own DEDUP token, so a second
failure after a redrive is dead-lettered again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from libs.codec import encode_record, iter_records
from libs.message import MessageRecord, Prop
from libs.names import TIMER_TOPIC
from libs.store.config import FlushMode
from services.broker.app import create_app
from tests.support.apps import broker_settings, in_process
from tests.support.broker_calls import make_group, put, receive, settle, topic_records
from tests.support.disk import stalled_disk
from tests.support.serving import ServedApp


@pytest.fixture
async def broker(nameserver: ServedApp) -> AsyncIterator[httpx.AsyncClient]:
    settings = broker_settings(nameserver, flush_mode=FlushMode.SYNC_FLUSH, sync_flush_timeout_ms=100, lease_scan_ms=10)
    async for client in in_process(create_app(settings)):
        await client.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})
        yield client


async def dead_letters(broker: httpx.AsyncClient) -> list[str | None]:
    answer = await broker.get("/internal/groups/billing/dlq")
    return [r.message_id for r in iter_records(answer.content)]


async def test_a_nack_whose_retry_put_timed_out_makes_one_retry_copy(
    broker: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_group(broker)
    (message_id,) = await put(broker, "a")
    ((handle, _, _),) = await receive(broker)
    with stalled_disk(monkeypatch) as disk:
        (nacked,) = await settle(broker, "nack", handle, delay_ms=0)
        disk.set()
    assert nacked["ok"], nacked

    received = await receive(broker)
    assert [(r.message_id, attempt) for _, attempt, r in received] == [(message_id, 2)], (
        "the message came back both in place and as its retry"
    )
    await settle(broker, "ack", *(h for h, _, _ in received))
    assert await receive(broker) == []
    assert [r.message_id for r in await topic_records(broker, "%RETRY%billing")] == [message_id]


async def test_a_dead_letter_whose_put_timed_out_is_kept_once(
    broker: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_group(broker, max_retries=0)
    (message_id,) = await put(broker, "poison")
    ((handle, _, _),) = await receive(broker)
    with stalled_disk(monkeypatch) as disk:
        (nacked,) = await settle(broker, "nack", handle, delay_ms=0)
        disk.set()
    assert nacked["ok"], nacked

    assert await receive(broker) == [], "the dead-lettered message was delivered again in place"
    assert await dead_letters(broker) == [message_id]


async def test_a_redrive_whose_put_timed_out_is_not_sent_again(
    broker: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_group(broker, max_retries=0)
    (message_id,) = await put(broker, "poison")
    ((handle, _, _),) = await receive(broker)
    await settle(broker, "nack", handle, delay_ms=0)
    with stalled_disk(monkeypatch) as disk:
        first = await broker.post("/internal/groups/billing/dlq:redrive", json={})
        disk.set()
    again = await broker.post("/internal/groups/billing/dlq:redrive", json={})

    assert first.status_code == 200, first.text
    assert first.json()["redriven"] == [message_id]
    assert again.json()["redriven"] == [], "the redrive that timed out was sent again"
    assert [(r.message_id, attempt) for _, attempt, r in await receive(broker)] == [(message_id, 1)]


async def test_a_redriven_message_that_fails_again_is_dead_lettered_again(broker: httpx.AsyncClient) -> None:
    await make_group(broker, max_retries=0)
    (message_id,) = await put(broker, "poison")
    ((handle, _, _),) = await receive(broker)
    await settle(broker, "nack", handle, delay_ms=0)
    await broker.post("/internal/groups/billing/dlq:redrive", json={})
    ((handle, attempt, _),) = await receive(broker)
    assert attempt == 1
    await settle(broker, "nack", handle, delay_ms=0)

    assert await receive(broker) == []
    # The redriven copy has left the DLQ: what the listing shows is the second failure's dead letter.
    assert await dead_letters(broker) == [message_id], "the second failure's dead letter was dropped"


async def test_a_roll_whose_flush_timed_out_counts_as_rolled(
    broker: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = encode_record(
        MessageRecord("orders", b"later", properties={Prop.UNIQ_KEY: "ID-later", Prop.DELAY_LEVEL: "3"})
    )
    original = (
        await broker.post("/internal/messages", headers={"content-type": "application/octet-stream"}, content=raw)
    ).json()["stored"][0]["physical_offset"]
    with stalled_disk(monkeypatch) as disk:
        answer = await broker.post("/internal/timers/rolls", json={"physical_offsets": [original]})
        disk.set()

    assert answer.status_code == 200, answer.text
    (rolled,) = answer.json()["results"]
    assert rolled["status"] == "rolled", "a stored copy was reported failed: the timer would roll it again"
    assert [r.physical_offset for r in await topic_records(broker, TIMER_TOPIC)] == [rolled["new_offset"]]
