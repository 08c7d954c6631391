"""A promoted slave goes on where its master was: what was redriven stays redriven, attempts go on counting
(issue 27). A real master and slave; the slave's store is then started as the broker name's master."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import httpx

from libs.codec import iter_records
from services.broker.app import create_app
from services.broker.consume.redriven import RedrivenMarks
from services.broker.metadata import AttemptStore, RedrivenStore, open_engine
from services.broker.settings import BrokerSettings
from tests.support.apps import broker_settings, in_process
from tests.support.broker_calls import make_group, put, receive, settle
from tests.support.replication import slave_settings
from tests.support.serving import ServedApp, serving
from tests.support.waiting import eventually


async def dead(client: httpx.AsyncClient, group: str) -> list[str]:
    listed = await client.get(f"/internal/groups/{group}/dlq")
    assert listed.status_code == 200, listed.text
    return [r.body.decode() for r in iter_records(listed.content)]


async def fail_once(client: httpx.AsyncClient, group: str) -> list[tuple[str, int]]:
    """Receive what is there for `group` and nack it (retried at once); (body, attempt) of each."""
    received = await receive(client, group)
    await settle(client, "nack", *(handle for handle, _, _ in received), group=group, delay_ms=0)
    return [(record.body.decode(), attempt) for _, attempt, record in received]


async def copied(slave: BrokerSettings) -> bool:
    """The slave's tables hold the master's redrive mark (billing's DLQ offset 1) and ledger's m0 failed twice."""
    engine = open_engine(slave.metadata_url)
    try:
        marks = RedrivenMarks(RedrivenStore(engine))
        await marks.load()
        attempts = await asyncio.to_thread(AttemptStore(engine).load)
        return marks.all() == {"billing": {1}} and list(attempts.values()) == [{0: 2}]
    finally:
        engine.dispose()


def promoted(slave: BrokerSettings, master: BrokerSettings, tmp_path: Path) -> BrokerSettings:
    """The master's settings on a copy of the slave's store: the slave started as its broker name's master."""
    settings = master.model_copy(update={"data_dir": tmp_path / "promoted"})
    shutil.copytree(slave.store_dir, settings.store_dir)
    return settings


async def test_a_promoted_slave_redrives_nothing_twice_and_counts_attempts_on(
    nameserver: ServedApp, tmp_path: Path
) -> None:
    master = broker_settings(nameserver)
    with serving(create_app(master), master.port) as served:
        async with httpx.AsyncClient(base_url=served.url) as to_master:
            await to_master.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})
            await make_group(to_master, "billing", max_retries=0)
            await make_group(to_master, "ledger", fifo=True, max_retries=2, fifo_suspend_ms=0)
            await make_group(to_master, "audit", max_retries=2)
            ids = await put(to_master, "m0", "m1", "m2")
            await fail_once(to_master, "billing")  # all three dead
            answer = await to_master.post("/internal/groups/billing/dlq:redrive", json={"message_ids": [ids[1]]})
            assert answer.json()["redriven"] == [ids[1]], answer.text
            assert [a for _, a in await fail_once(to_master, "ledger")] == [1]  # m0 holds the FIFO queue
            assert [a for _, a in await fail_once(to_master, "ledger")] == [2]
            assert sorted(a for _, a in await fail_once(to_master, "audit")) == [1, 1, 1]

            slave = slave_settings(nameserver, served)
            async for _ in in_process(create_app(slave)):
                await eventually(lambda: copied(slave), "the slave has its master's redrive marks and attempts")

    async for client in in_process(create_app(promoted(slave, master, tmp_path))):
        assert await dead(client, "billing") == ["m0", "m2"], "the dead letter redriven on the old master is back"
        redrive = (await client.post("/internal/groups/billing/dlq:redrive", json={})).json()
        assert (redrive["redriven"], redrive["remaining"]) == ([ids[0], ids[2]], 0)

        assert await fail_once(client, "ledger") == [("m0", 3)], "the FIFO message's attempts started again"
        assert await dead(client, "ledger") == ["m0"], "not dead-lettered after max_retries + 1 attempts"

        assert sorted(a for _, a in await fail_once(client, "audit")) == [2, 2, 2]
        assert sorted(a for _, a in await fail_once(client, "audit")) == [3, 3, 3]
        assert sorted(await dead(client, "audit")) == ["m0", "m1", "m2"]
