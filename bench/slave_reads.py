"""Time to first read from a slave: from a send's 2xx answer until the same message is readable on the slave.

One message at a time is sent through the gateway to a topic of one queue; at
its answer the clock starts, and a pull at the answer's queue offset is made on
the slave, held there (`wait_ms`) until the slave has copied and indexed the
message; the clock stops when a pull returns it (checked by its message id).
The reference is the same read from the master, made for every other send: the
pull's own round trip, which the slave's figure includes too. Sends alternate
between the two, so both see the same cluster in the same state.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from bench.loadgen import JSON_BODY, TEXT_BODY
from bench.replication_lag import Replicas
from libs.codec import iter_records
from libs.http.paths import internal_path

PULL_WAIT_MS = 5_000
READ_TIMEOUT = 30.0
"""seconds a sent message may take to be readable before the measurement fails"""


@dataclass(frozen=True, slots=True)
class FirstReads:
    slave_ms: list[float]
    master_ms: list[float]


def wait_for_topic(replicas: Replicas, topic: str, timeout: float = 60.0) -> None:
    """Return once the slave has `topic` (it copies its master's topics after they change)."""
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(
        replicas.slave + internal_path("/internal/topics/{topic}", topic=topic), headers=replicas.headers
    )
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10):
                return
        except urllib.error.HTTPError as exc:
            if exc.code != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def first_reads(gateway: str, topic: str, replicas: Replicas, count: int) -> FirstReads:
    """`count` sends read first from the slave, and `count` others from the master, alternating."""
    import uvloop

    return uvloop.run(_first_reads(gateway, topic, replicas, count))


async def _first_reads(gateway: str, topic: str, replicas: Replicas, count: int) -> FirstReads:
    import aiohttp

    reads = FirstReads([], [])
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4)) as session:
        for n in range(2 * count):
            to_slave = n % 2 == 1
            where = replicas.slave if to_slave else replicas.master
            ms = await _first_read(session, f"{gateway}/v1/topics/{topic}/messages", where, topic, replicas.headers)
            (reads.slave_ms if to_slave else reads.master_ms).append(ms)
    return reads


async def _first_read(session: Any, send_url: str, broker: str, topic: str, headers: dict[str, str]) -> float:
    """Send one message; ms from its answer until `broker` returns it to a pull."""
    async with session.post(send_url, json={"body": TEXT_BODY}, headers=JSON_BODY) as response:
        answer = await response.json()
        if response.status >= 300:
            raise RuntimeError(f"a send answered {response.status}: {answer}")
    answered = time.perf_counter()
    await _readable(
        session,
        broker
        + internal_path(
            "/internal/topics/{topic}/queues/{queue_id}/messages", topic=topic, queue_id=answer["queue_id"]
        ),
        answer,
        headers,
    )
    return (time.perf_counter() - answered) * 1000


async def _readable(session: Any, pull_url: str, sent: dict[str, Any], headers: dict[str, str]) -> None:
    """Pull at the sent message's offset until the broker returns it; 416 (the broker's queue ends before
    that offset) and an empty answer (the long poll ended first) are asked again."""
    params = {"offset": sent["queue_offset"], "max": 1, "wait_ms": PULL_WAIT_MS}
    deadline = time.monotonic() + READ_TIMEOUT
    while time.monotonic() < deadline:
        async with session.get(pull_url, params=params, headers=headers) as response:
            body = await response.read()
            if response.status == 416:
                await asyncio.sleep(0.001)
                continue
            if response.status != 200:
                raise RuntimeError(f"a pull of {pull_url} answered {response.status}: {body[:300]!r}")
        records = list(iter_records(body))
        if records:
            if records[0].message_id != sent["message_id"]:
                raise RuntimeError(f"{pull_url} at {params['offset']} holds {records[0].message_id}, not {sent}")
            return
    raise TimeoutError(f"{sent['message_id']} was not readable at {pull_url} within {READ_TIMEOUT:.0f} s")
