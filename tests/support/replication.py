"""Calls of the replication tests: a slave's settings, puts on a master, pulls on a slave that wait for its copy."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.types import ASGIApp

from libs.broker_api.replication import BrokerRole
from libs.codec import encode_record, iter_records
from libs.http.asgi import running
from libs.message import MessageRecord, Prop
from services.broker.app import create_app
from services.broker.settings import BrokerSettings
from tests.support.apps import broker_settings
from tests.support.serving import ServedApp

BINARY = {"content-type": "application/octet-stream"}
WAIT_MS = 10_000
"""How long a pull on the slave may wait for what the master stored: a bound, not a pace."""


def slave_settings(nameserver: ServedApp, master: ServedApp) -> BrokerSettings:
    return broker_settings(nameserver, broker_id=1, role=BrokerRole.SLAVE, master_address=master.address)


async def put(broker: httpx.AsyncClient, first: int, count: int, queue_id: int = 0) -> None:
    records = [
        encode_record(
            MessageRecord(
                topic="orders",
                body=f"m{n}".encode(),
                queue_id=queue_id,
                properties={Prop.UNIQ_KEY: f"ID-{n}", Prop.KEYS: f"k{n}"},
            )
        )
        for n in range(first, first + count)
    ]
    answer = await broker.post("/internal/messages", headers=BINARY, content=b"".join(records))
    assert answer.status_code == 200, answer.text


async def pulled(broker: httpx.AsyncClient, offset: int, wait_ms: int = WAIT_MS, max_count: int = 32) -> list[str]:
    """Bodies from `offset` on, waiting up to `wait_ms` for the first to be there."""
    answer = await broker.get(
        "/internal/topics/orders/queues/0/messages", params={"offset": offset, "max": max_count, "wait_ms": wait_ms}
    )
    assert answer.status_code == 200, answer.text
    return [r.body.decode() for r in iter_records(answer.content)]


async def copied_to(slave: httpx.AsyncClient, count: int) -> list[str]:
    """Every body of orders/0 on the slave once its `count`-th message is there (each pull at the queue's end
    waits for the next message the slave copies)."""
    bodies: list[str] = []
    while len(bodies) < count:
        arrived = await pulled(slave, len(bodies))
        assert arrived, f"the slave has {len(bodies)} of {count} messages and nothing came in {WAIT_MS} ms"
        bodies += arrived
    return bodies


@contextlib.asynccontextmanager
async def in_sync_slave(
    nameserver: ServedApp, master: Any, in_process_apps: dict[str, ASGIApp]
) -> AsyncIterator[ASGIApp]:
    """A slave (broker id 1) of `master` (a served broker), run in-process where the gateway's transport finds it,
    once it is in its master's in-sync set."""
    settings = slave_settings(nameserver, master)
    async with running(create_app(settings)) as slave:
        in_process_apps[settings.address] = slave
        async with httpx.AsyncClient(base_url=master.url) as to_master:
            joined = await to_master.get("/internal/replication", params={"in_sync": 1, "wait_ms": WAIT_MS})
            assert joined.json()["in_sync"] == [1], joined.text
        yield slave
