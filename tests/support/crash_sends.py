"""Senders that send until the gateway fails them: the load of the kill -9 tests, and what each got answered."""

from __future__ import annotations

import asyncio
import os
import signal

import httpx

from deploy.supervisor import Supervisor
from libs.codec import iter_records

KILL_AFTER = 300
CRASH_BROKER = {
    "PETREL_BROKER_SEGMENT_SIZE": str(8 * 1024 * 1024),
    "PETREL_BROKER_INDEX_SLOT_COUNT": "65536",
    "PETREL_BROKER_INDEX_MAX_ENTRIES": "400000",
    "PETREL_BROKER_CQ_UNITS_PER_FILE": "500",
    "PETREL_BROKER_REGISTER_INTERVAL_SECONDS": "0.5",
}
"""A broker's settings in the kill -9 tests: small files, so that the load spans several, and quick registration."""


async def send_until_failure(
    client: httpx.AsyncClient, sender: int, acked: dict[str, tuple[int, int, str]], enough: asyncio.Event
) -> None:
    for n in range(100_000):
        body = f"sender {sender} message {n} " + "x" * (n % 300)
        try:
            answer = await client.post("/v1/topics/crash/messages", json={"body": body})
        except httpx.HTTPError:
            return
        if answer.status_code != 201:
            return
        result = answer.json()
        acked[result["message_id"]] = (result["queue_id"], result["queue_offset"], body)
        if len(acked) >= KILL_AFTER:
            enough.set()


async def kill_9_under_sends(
    client: httpx.AsyncClient, supervisor: Supervisor, name: str, senders: int
) -> dict[str, tuple[int, int, str]]:
    """`senders` senders on topic `crash` until KILL_AFTER sends were answered, then kill -9 of process `name`;
    once every sender has stopped at its first failure: what was answered (message id -> queue, offset, body)."""
    acked: dict[str, tuple[int, int, str]] = {}
    enough = asyncio.Event()
    sending = [asyncio.create_task(send_until_failure(client, i, acked, enough)) for i in range(senders)]
    await asyncio.wait_for(enough.wait(), 60)
    process = next(c.process for c in supervisor.children if c.spec.name == name)
    os.kill(process.pid, signal.SIGKILL)
    await asyncio.gather(*sending)
    process.wait()
    return acked


async def read_topic(broker: httpx.AsyncClient, queues: int) -> dict[str, tuple[int, int, str]]:
    """Every message of topic `crash` on one broker, by its internal pulls: message id -> (queue, offset, body)."""
    found: dict[str, tuple[int, int, str]] = {}
    for queue in range(queues):
        offset = 0
        while True:
            answer = await broker.get(f"/internal/topics/crash/queues/{queue}/messages", params={"offset": offset})
            assert answer.status_code in (200, 416), answer.text
            records = list(iter_records(answer.content)) if answer.status_code == 200 else []
            if not records:
                break
            for record in records:
                found[record.message_id or ""] = (queue, record.queue_offset, record.body.decode())
            offset = records[-1].queue_offset + 1
    return found
