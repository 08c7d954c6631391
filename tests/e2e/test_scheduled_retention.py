"""On real processes: scheduled messages due long after the broker's retention are delivered, once.

64 KiB segments, a retention of 3.6 s (0.001 h) running every 0.2 s: without the
timer's roll, the segment holding them is deleted long before they are due (15 s, delay
level 4 here). Their segment is gone about 4 s after the send and both kills are over by
6 s (12 s on a day this machine runs 4x slower): they come due after the kills.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cluster import LocalCluster, local_cluster
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e


def retention_env() -> dict[str, str]:
    return {
        "PETREL_BROKER_SEGMENT_SIZE": str(64 * 1024),
        "PETREL_BROKER_FILE_RESERVED_HOURS": "0.001",
        "PETREL_BROKER_DELETE_WHEN_HOUR": "-1",
        "PETREL_BROKER_RETENTION_SCAN_SECONDS": "0.2",
        "PETREL_TIMER_RETENTION_CHECK_MS": "300",
        "PETREL_DELAY_LEVELS": "1s 5s 10s 15s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
    }


async def send(client: httpx.AsyncClient, topic: str, body: str, **fields: Any) -> dict[str, Any]:
    answer = await client.post(f"/v1/topics/{topic}/messages", json={"body": body, **fields})
    assert answer.status_code == 201, answer.text
    return answer.json()  # type: ignore[no-any-return]


async def bodies(client: httpx.AsyncClient) -> list[str]:
    page = (await client.get("/v1/topics/later/queues/0/messages", params={"max": 100})).json()
    return [m["body"] for m in page["messages"]]


def broker_events(cluster: LocalCluster, name: str) -> list[dict[str, Any]]:
    lines = [
        json.loads(line)
        for path in (cluster.data_dir / "export" / "events").rglob("broker-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    return [line for line in lines if line["event"] == name]


def commitlog_start(cluster: LocalCluster) -> int:
    return min(int(p.name) for p in (cluster.data_dir / "brokers" / "broker-a" / "commitlog").iterdir())


async def test_messages_scheduled_past_the_retention_are_delivered_once_through_kills(tmp_path: Path) -> None:
    async with local_cluster(tmp_path / "data", **retention_env()) as (cluster, client):
        for topic in ("later", "filler"):
            assert (await client.put(f"/v1/topics/{topic}", json={"queues": 1})).status_code == 201
        by_level = await send(client, "later", "level 4 (15 s)", delay_level=4)
        by_delay = await send(client, "later", "in 16 s", delay_ms=16_000)
        for start in range(0, 300, 25):  # five segments after theirs
            batch = {"messages": [{"body": f"{i:04d}" + "f" * 1000} for i in range(start, start + 25)]}
            answer = await client.post("/v1/topics/filler/messages:batch", json=batch)
            assert [r["error"] for r in answer.json()["results"]] == [None] * 25, answer.text

        async def first_segment_gone() -> bool:
            return commitlog_start(cluster) > 0

        await eventually(first_segment_gone, "retention deleted the scheduled messages' segment", timeout=15)
        await cluster.kill("timer")  # kill -9 of either after the roll: nothing of it is lost
        await cluster.restart("timer")
        await cluster.kill_and_restart("broker-a", client, "later")

        async def both_delivered() -> bool:
            return len(await bodies(client)) >= 2

        await eventually(both_delivered, "both scheduled messages delivered", timeout=30)
        page = (await client.get("/v1/topics/later/queues/0/messages", params={"max": 100})).json()
        delivered = {m["message_id"]: m for m in page["messages"]}
        assert sorted(delivered) == sorted([by_level["message_id"], by_delay["message_id"]])
        for sent in (by_level, by_delay):
            assert delivered[sent["message_id"]]["stored_at"] >= sent["deliver_at"], "delivered before it was due"
        assert {e["message_id"] for e in broker_events(cluster, "delay_rolled")} >= set(delivered)
        assert broker_events(cluster, "delay_lost") == []
        assert (await client.get("/v1/timers/stats")).json()["failed"] == 0
