"""Kill -9 of the gateway in the middle of sends with an Idempotency-Key: repeats never store a second copy.

Real processes under SYNC_FLUSH. Each round starts a batch send, kills the gateway at a
seeded random moment (before, during or after the broker stored it), restarts it, and
repeats the request with the same key until it is answered. Every message must then
be stored exactly once, with the id the answer names. Rerun a failure with its seed
(TEST_SEED).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cluster import LocalCluster, local_cluster
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e

ROUNDS = 6
BATCH = 100
QUEUES = 2
PADDING = "x" * 1024


async def repeat_until_answered(client: httpx.AsyncClient, key: str, batch: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = {}

    async def answered() -> bool:
        nonlocal answer
        with contextlib.suppress(httpx.TransportError):
            sent = await client.post("/v1/topics/pay/messages:batch", json=batch, headers={"Idempotency-Key": key})
            if sent.status_code == 200 and all(e["result"] for e in sent.json()["results"]):
                answer = sent.json()
                return True
        return False

    await eventually(answered, f"the batch with Idempotency-Key {key} is answered after the restart", timeout=20)
    return answer


async def kill_mid_send(cluster: LocalCluster, client: httpx.AsyncClient, batch: dict[str, Any], delay: float) -> str:
    key = str(uuid.uuid4())
    first = asyncio.create_task(
        client.post("/v1/topics/pay/messages:batch", json=batch, headers={"Idempotency-Key": key})
    )
    await asyncio.wait({first}, timeout=delay)  # the kill's moment: chaos injection, not a wait for a state
    await cluster.kill("gateway")
    with contextlib.suppress(httpx.TransportError):
        await first
    await cluster.restart("gateway")
    return key


async def timed_send(client: httpx.AsyncClient, batch: dict[str, Any]) -> float:
    """How long a batch send takes here, in seconds: the kills fall within such a span."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    sent = await client.post("/v1/topics/pay/messages:batch", json=batch, headers={"Idempotency-Key": uuid.uuid4().hex})
    assert sent.status_code == 200, sent.text
    return loop.time() - began


async def stored_bodies(client: httpx.AsyncClient) -> Counter[str]:
    bodies: Counter[str] = Counter()
    for queue in range(QUEUES):
        offset, end = 0, 1
        while offset < end:
            page = await client.get(f"/v1/topics/pay/queues/{queue}/messages", params={"offset": offset, "max": 256})
            assert page.status_code == 200, page.text
            bodies.update(m["body"] for m in page.json()["messages"])
            offset, end = page.json()["next_offset"], page.json()["max_offset"]
    return bodies


async def test_a_gateway_killed_mid_send_never_makes_a_repeat_store_twice(tmp_path: Path) -> None:
    seed = int(os.environ.get("TEST_SEED", random.randrange(2**32)))
    chance = random.Random(seed)
    env = {"PETREL_BROKER_FLUSH_MODE": "SYNC_FLUSH", "PETREL_GATEWAY_IDEMPOTENCY_LEASE_MS": "500"}
    async with local_cluster(tmp_path, **env) as (cluster, client):
        assert (await client.put("/v1/topics/pay", json={"queues": QUEUES})).status_code in (200, 201)
        timed = await timed_send(client, {"messages": [{"body": f"warm-up {i}"} for i in range(BATCH)]})
        answers: dict[str, dict[str, Any]] = {}
        for round_ in range(ROUNDS):
            batch = {"messages": [{"body": f"r{round_}-m{i}", "properties": {"pad": PADDING}} for i in range(BATCH)]}
            key = await kill_mid_send(cluster, client, batch, chance.uniform(0.0, timed))
            answers[key] = await repeat_until_answered(client, key, batch)

        bodies = await stored_bodies(client)
        twice = {body: n for body, n in bodies.items() if n > 1}
        assert not twice, f"seed {seed}: stored more than once: {twice}"
        assert len(bodies) == (ROUNDS + 1) * BATCH, f"seed {seed}: {(ROUNDS + 1) * BATCH - len(bodies)} missing"
        for answer in answers.values():
            again = {e["result"]["message_id"] for e in answer["results"]}
            assert len(again) == BATCH, f"seed {seed}: the answer names {len(again)} ids for {BATCH} messages"
