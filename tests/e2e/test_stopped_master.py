"""SIGSTOP of a master with sends waiting on it (issue 27): they are answered by its promoted slave, not after 10 s.

A stopped master holds its connections and answers nothing. Its slave is master about 2 s later (the lease's TTL,
then one election); a put waiting on the stopped one used to wait out the gateway's put timeout (10 s) and be
answered 503, the key's repeats refused 409 meanwhile. Now the gateway asks the nameservers, while the put waits,
whether the broker name has another master: a send with an Idempotency-Key goes again to the same queue of the new
master (under the same id, so that a copy it got by replication is answered, not stored twice), and a send without
one is answered 503 `maybe_stored` at once. Every answered message is read back exactly once after the old master
returns (as the new one's slave).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.support.cluster import replicated_cluster
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e

TOPIC = "stopped"
QUEUES = 4
KEYED = 6
KEYLESS = 4
PUT_TIMEOUT_S = 10.0
"""What a put to a master that answers nothing waited before (twice the gateway's 5 s broker timeout)."""


async def send(client: httpx.AsyncClient, body: str, key: str | None) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    headers = {"Idempotency-Key": key} if key else {}
    answer = await client.post(f"/v1/topics/{TOPIC}/messages", json={"body": body}, headers=headers, timeout=30)
    return answer, time.monotonic() - started


async def read_back(client: httpx.AsyncClient) -> list[str]:
    """The body of every message of the topic, each queue read through the gateway from offset 0 to its end."""
    bodies: list[str] = []
    for queue in range(QUEUES):
        offset = 0
        while True:
            answer = await client.get(
                f"/v1/topics/{TOPIC}/queues/{queue}/messages", params={"offset": offset, "max": 256}
            )
            assert answer.status_code == 200, answer.text
            page = answer.json()
            bodies += [m["body"] for m in page["messages"]]
            if not page["messages"] or page["next_offset"] >= page["max_offset"]:
                break
            offset = page["next_offset"]
    return bodies


@pytest.mark.timeout(120)
async def test_sends_waiting_on_a_stopped_master_are_answered_by_its_promoted_slave(tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]  # Redis keeps Idempotency-Keys a day: a key of another run must not match
    async with replicated_cluster(tmp_path / "data") as (cluster, client):
        assert (await client.put(f"/v1/topics/{TOPIC}", json={"queues": QUEUES})).status_code in (200, 201)

        async def warm() -> bool:
            return (await send(client, f"{run} warm", None))[0].status_code == 201

        await eventually(warm, "a send answered 201", timeout=30)
        stopped = await cluster.master()

        cluster.pause(stopped)
        try:
            keyed = [send(client, f"{run} keyed {n}", f"{run}-keyed-{n}") for n in range(KEYED)]
            keyless = [send(client, f"{run} keyless {n}", None) for n in range(KEYLESS)]
            answers = await asyncio.gather(*keyed, *keyless)
            assert await cluster.master() != stopped  # answered while the old master is still stopped
        finally:
            cluster.resume(stopped)

        print("answered after", ", ".join(f"{took:.1f} s ({answer.status_code})" for answer, took in answers))
        for answer, took in answers[:KEYED]:
            assert answer.status_code == 201, answer.text
            assert took < PUT_TIMEOUT_S, f"answered after {took:.1f} s"
        for answer, took in answers[KEYED:]:
            assert took < PUT_TIMEOUT_S, f"answered after {took:.1f} s"
            if answer.status_code != 201:  # sent to the stopped master: it may be stored, the client is told so
                assert answer.status_code == 503, answer.text
                assert answer.json()["maybe_stored"] is True, answer.text

        bodies = await read_back(client)
        for n in range(KEYED):
            assert bodies.count(f"{run} keyed {n}") == 1, f"keyed {n} stored {bodies.count(f'{run} keyed {n}')} times"
        for n, (answer, _) in enumerate(answers[KEYED:]):
            count = bodies.count(f"{run} keyless {n}")
            assert count == 1 if answer.status_code == 201 else count <= 1, f"keyless {n} stored {count} times"
