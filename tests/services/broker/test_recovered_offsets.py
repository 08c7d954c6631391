"""Consumer offsets past a queue's end after recovery are lowered, so new messages at reused offsets are delivered.

Under ASYNC_FLUSH a machine crash may lose the CommitLog's unflushed tail while the
offsets that consumed it were persisted: the test restores the store files as the
disk last had them durably (a snapshot), keeping the newer metadata (offsets).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx

from services.broker.app import create_app
from services.broker.settings import BrokerSettings
from tests.support.apps import broker_settings, in_process
from tests.support.broker_calls import bodies, make_group, put, receive, settle
from tests.support.serving import ServedApp

STORE_FILES = ("commitlog", "consumequeue", "index", "checkpoint")


def snapshot(store_dir: Path, to: Path) -> None:
    for name in STORE_FILES:
        source = store_dir / name
        if source.is_dir():
            shutil.copytree(source, to / name)
        elif source.exists():
            shutil.copy2(source, to / name)


def lose_the_unflushed_tail(store_dir: Path, durable: Path) -> None:
    """The store files go back to what the disk had durably; the abort file says the broker crashed."""
    for name in STORE_FILES:
        path = store_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    snapshot(durable, store_dir)
    (store_dir / "abort").touch()


async def pull_offset(client: httpx.AsyncClient, group: str) -> int:
    answer = await client.get(f"/internal/consumer-offsets/{group}")
    assert answer.status_code == 200, answer.text
    [offset] = [o["offset"] for o in answer.json()["offsets"] if o["topic"] == "orders" and o["queue_id"] == 0]
    return int(offset)


async def consumed_up_to_six(settings: BrokerSettings, durable: Path) -> None:
    async for client in in_process(create_app(settings)):
        await client.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})
        await make_group(client)
        await put(client, "m0", "m1", "m2")
        await settle(client, "ack", *(handle for handle, _, _ in await receive(client)))
    snapshot(settings.store_dir, durable)  # m0..m2 are on disk, and durable
    async for client in in_process(create_app(settings)):
        await put(client, "m3", "m4", "m5")  # answered from the page cache (ASYNC_FLUSH) ...
        await settle(client, "ack", *(handle for handle, _, _ in await receive(client)))
        committed = await client.put("/internal/consumer-offsets/puller/orders/0", json={"offset": 6})
        assert committed.status_code == 200, committed.text
    lose_the_unflushed_tail(settings.store_dir, durable)  # ... and lost with the machine; the offsets were kept


async def test_offsets_ahead_of_a_recovered_queue_are_lowered_and_new_messages_delivered(
    nameserver: ServedApp, tmp_path: Path
) -> None:
    settings = broker_settings(nameserver)
    await consumed_up_to_six(settings, tmp_path / "durable")

    async for client in in_process(create_app(settings)):
        offsets = await client.get("/internal/topics/orders/queues/0/offsets")
        assert offsets.json()["max_offset"] == 3
        assert await pull_offset(client, "puller") == 3
        assert await pull_offset(client, "billing") == 3
        await put(client, "n3", "n4", "n5")  # stored at queue offsets 3, 4, 5 again
        assert bodies(await receive(client)) == ["n3", "n4", "n5"]
        pulled = await client.get("/internal/topics/orders/queues/0/messages", params={"offset": 3})
        assert pulled.status_code == 200, pulled.text
        assert pulled.headers["x-petrel-max-offset"] == "6"
