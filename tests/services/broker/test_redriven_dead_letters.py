"""A redriven dead letter leaves the DLQ: the listing shows what is still dead, across a restart, in bounded memory."""

from __future__ import annotations

from pathlib import Path

import httpx

from libs.codec import iter_records
from services.broker.app import create_app
from services.broker.consume.redriven import RedrivenMarks
from services.broker.metadata import RedrivenStore, open_engine
from tests.support.apps import broker_settings, in_process
from tests.support.broker_calls import make_group, put, receive, settle
from tests.support.serving import ServedApp


async def still_dead(client: httpx.AsyncClient) -> list[str]:
    listed = await client.get("/internal/groups/billing/dlq")
    assert listed.status_code == 200, listed.text
    return [r.body.decode() for r in iter_records(listed.content)]


async def redrive(client: httpx.AsyncClient, **body: object) -> dict[str, object]:
    answer = await client.post("/internal/groups/billing/dlq:redrive", json=body)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_what_was_redriven_stays_out_of_the_dlq_across_restarts(nameserver: ServedApp) -> None:
    settings = broker_settings(nameserver, offset_persist_interval_seconds=3600)
    async for client in in_process(create_app(settings)):
        await client.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})
        await make_group(client, max_retries=0)
        ids = await put(client, "m0", "m1", "m2")
        await settle(client, "nack", *(handle for handle, _, _ in await receive(client)), delay_ms=0)
        assert await still_dead(client) == ["m0", "m1", "m2"]
        assert (await redrive(client, message_ids=[ids[1]]))["redriven"] == [ids[1]]
    async for client in in_process(create_app(settings)):
        assert await still_dead(client) == ["m0", "m2"], "the message redriven by id is listed again after a restart"
        rest = await redrive(client)
        assert (rest["redriven"], rest["remaining"]) == ([ids[0], ids[2]], 0)
    async for client in in_process(create_app(settings)):
        assert await still_dead(client) == []
        assert (await redrive(client, message_ids=[ids[1]]))["not_found"] == [ids[1]]
        assert (await redrive(client))["redriven"] == []


async def test_marks_are_bounded_and_passed_by_the_cursor(tmp_path: Path) -> None:
    store = RedrivenStore(open_engine(f"sqlite:///{tmp_path / 'meta.db'}"))
    marks = RedrivenMarks(store, max_marks=2)
    assert await marks.mark("billing", [1, 2], cursor=0) == 0
    assert await marks.mark("billing", [0], cursor=0) == 3, "the cursor did not move over the marks before it"
    await marks.prune("billing", 3)
    assert await marks.mark("billing", [5, 6, 7], cursor=3) == 3
    assert [o for o in range(8) if marks.is_marked("billing", o)] == [6, 7], "the oldest mark beyond the cap stays"
    reloaded = RedrivenMarks(store)
    await reloaded.load()
    assert [o for o in range(8) if reloaded.is_marked("billing", o)] == [6, 7]
