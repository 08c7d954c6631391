"""Calls a test makes to a gateway's public API: sends, pulls, receives, settles, and reading a problem."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from tests.support.serving import ServedApp, free_port

PROBLEM = "application/problem+json"


def problem_type(answer: httpx.Response) -> str:
    assert answer.headers["content-type"] == PROBLEM, answer.text
    return str(answer.json()["type"]).removeprefix("https://petrel.dev/problems/")


async def register_silent_broker(nameserver: ServedApp, topic: str) -> str:
    """A broker the nameserver believes alive that answers nothing (as after kill -9)."""
    address = f"127.0.0.1:{free_port()}"
    body = {
        "cluster": "DefaultCluster",
        "address": address,
        "data_version": 1,
        "topics": [{"name": topic, "read_queues": 8, "write_queues": 8}],
    }
    async with httpx.AsyncClient() as client:
        answer = await client.put(f"{nameserver.url}/internal/brokers/broker-c/0", json=body)
    answer.raise_for_status()
    return address


async def send(gateway: httpx.AsyncClient, topic: str, message: Mapping[str, Any], **headers: str) -> httpx.Response:
    return await gateway.post(f"/v1/topics/{topic}/messages", json=message, headers=headers)


async def pull(gateway: httpx.AsyncClient, topic: str, queue: int, broker: str, **params: Any) -> Any:
    answer = await gateway.get(f"/v1/topics/{topic}/queues/{queue}/messages", params={"broker": broker, **params})
    assert answer.status_code == 200, answer.text
    return answer.json()


async def send_many(gateway: httpx.AsyncClient, topic: str, count: int, **fields: Any) -> list[str]:
    """Send `count` messages (bodies m0, m1, ...); their ids, in order."""
    ids = []
    for index in range(count):
        sent = await gateway.post(f"/v1/topics/{topic}/messages", json={"body": f"m{index}", **fields})
        assert sent.status_code == 201, sent.text
        ids.append(sent.json()["message_id"])
    return ids


async def receive(gateway: httpx.AsyncClient, group: str, topic: str, **body: Any) -> httpx.Response:
    return await gateway.post(f"/v1/groups/{group}/topics/{topic}/receive", json=body)


async def received(gateway: httpx.AsyncClient, group: str, topic: str, **body: Any) -> list[dict[str, Any]]:
    answer = await receive(gateway, group, topic, **body)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["messages"])


async def ack(gateway: httpx.AsyncClient, group: str, handles: list[str]) -> httpx.Response:
    answer = await gateway.post(f"/v1/groups/{group}/ack", json={"receipt_handles": handles})
    assert answer.status_code == 200, answer.text
    return answer


async def nack(gateway: httpx.AsyncClient, group: str, handles: list[str], **fields: Any) -> httpx.Response:
    answer = await gateway.post(f"/v1/groups/{group}/nack", json={"receipt_handles": handles, **fields})
    assert answer.status_code == 200, answer.text
    return answer


async def long_polls_waiting(gateway: httpx.AsyncClient) -> int:
    """How many receives and pulls the gateway holds waiting for a message (its gauge)."""
    text = (await gateway.get("/metrics")).text
    (line,) = [line for line in text.splitlines() if line.startswith("petrel_gateway_long_polls_waiting ")]
    return int(float(line.split()[1]))
