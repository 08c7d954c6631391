"""A long poll whose client went away ends with it: it never takes a message meant for a live consumer."""

from __future__ import annotations

import asyncio

import httpx

from libs.broker_api.frames import decode_leased
from libs.codec import encode_record
from libs.message import MessageRecord, Prop
from services.broker.app import create_app
from tests.support.apps import broker_settings
from tests.support.serving import ServedApp, serving
from tests.support.waiting import eventually

RECEIVE = "/internal/groups/billing/topics/orders/receive"


def connections(broker: ServedApp) -> int:
    return len(broker.server.server_state.connections)


async def test_a_receive_whose_client_left_takes_no_message(nameserver: ServedApp) -> None:
    settings = broker_settings(nameserver)
    with serving(create_app(settings), settings.port) as broker:
        async with httpx.AsyncClient(base_url=broker.url) as client, httpx.AsyncClient(base_url=broker.url) as leaver:
            await client.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})
            await client.put("/internal/groups/billing", json={})
            await client.post(RECEIVE, json={"max_messages": 1, "invisible_ms": 60_000})  # the group subscribes
            baseline = connections(broker)
            body = {"max_messages": 1, "invisible_ms": 60_000, "wait_ms": 20_000}
            abandoned = asyncio.create_task(leaver.post(RECEIVE, json=body, timeout=60))

            async def held() -> bool:
                return connections(broker) > baseline

            async def left() -> bool:
                return connections(broker) == baseline

            await eventually(held, "the broker holds the long poll")
            abandoned.cancel()  # the consumer gives up: its connection closes
            await asyncio.gather(abandoned, return_exceptions=True)
            await eventually(left, "the broker saw the client leave")

            record = MessageRecord(topic="orders", body=b"m", properties={Prop.UNIQ_KEY: "M1", Prop.TAGS: "t"})
            assert (
                await client.post(
                    "/internal/messages",
                    headers={"content-type": "application/octet-stream"},
                    content=encode_record(record),
                )
            ).status_code == 200
            answer = await client.post(RECEIVE, json={"max_messages": 1, "invisible_ms": 60_000})
            leases, _ = decode_leased(answer.content)
            assert len(leases) == 1, "the message was leased to the consumer that had left"
