"""Senders that send until the gateway fails them: the load of the kill -9 tests, and what each got answered."""

from __future__ import annotations

import asyncio

import httpx

KILL_AFTER = 300


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
