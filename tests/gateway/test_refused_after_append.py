"""A put a broker refused after appending it (maybe stored) is never sent to another broker, and its key holds.

Broker `broker-c` is a fake one in this process: it answers its first put of each message
as a master that lost its lease or its slaves after the append would (409 not-master or 503
replication-timeout, `maybe_stored`), and a repeat with the stored copy, as a DEDUP put is
answered. A refusal before anything was stored (no `maybe_stored`) still goes elsewhere.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from libs.codec import iter_records
from libs.message import Prop
from tests.support.gateway_calls import problem_type, pull, send
from tests.support.serving import ServedApp, free_port

REFUSALS = {
    "not-master": 409,
    "replication-timeout": 503,
}


@dataclass
class RefusingBroker:
    """Refuses the first put of each message with `refusal`; `after_append`: says it may be stored."""

    refusal: str
    after_append: bool
    puts: list[list[str]] = field(default_factory=list)
    """The message ids of each put it got."""
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)

    async def put(self, request: Request) -> Response:
        records = list(iter_records(await request.body()))
        self.puts.append([r.properties[Prop.UNIQ_KEY] for r in records])
        entries = [self._entry(r.topic, r.queue_id, r.properties[Prop.UNIQ_KEY]) for r in records]
        if len(self.puts) > 1:
            return JSONResponse({"stored": entries, "failure": None, "not_durable": None})
        problem: dict[str, Any] = {
            "type": f"https://petrel.dev/problems/{self.refusal}",
            "title": self.refusal,
            "status": REFUSALS[self.refusal],
            "detail": f"broker-c refused the put ({self.refusal})",
        }
        if self.after_append:
            problem |= {"maybe_stored": True, "broker": "broker-c", "stored": entries}
        return JSONResponse(problem, status_code=REFUSALS[self.refusal], media_type="application/problem+json")

    def _entry(self, topic: str, queue_id: int, message_id: str) -> dict[str, Any]:
        known = self.stored.get(message_id)
        if known is None:
            offset = len(self.stored)
            known = self.stored[message_id] = {
                "topic": topic,
                "queue_id": queue_id,
                "queue_offset": offset,
                "physical_offset": 100 * offset,
                "store_timestamp": 1_700_000_000_000,
                "message_id": message_id,
            }
        return known


async def with_broker_c(
    nameserver: ServedApp, gateway: httpx.AsyncClient, in_process_apps: dict[str, ASGIApp], fake: RefusingBroker
) -> None:
    """`orders` on broker-a and broker-b, then on the fake broker-c too."""
    assert (await gateway.put("/v1/topics/orders", json={"queues": 1})).status_code in (200, 201)
    address = f"127.0.0.1:{free_port()}"
    in_process_apps[address] = Starlette(routes=[Route("/internal/messages", fake.put, methods=["POST"])])
    body = {
        "cluster": "DefaultCluster",
        "address": address,
        "data_version": 1,
        "topics": [{"name": "orders", "read_queues": 1, "write_queues": 1}],
    }
    async with httpx.AsyncClient() as client:
        (await client.put(f"{nameserver.url}/internal/brokers/broker-c/0", json=body)).raise_for_status()


async def until_broker_c_gets_one(gateway: httpx.AsyncClient, fake: RefusingBroker) -> tuple[str, str, httpx.Response]:
    """Sends (each with its own Idempotency-Key) until one went to broker-c: its body, key and answer."""
    for i in range(12):
        body, key = f"m{i}", str(uuid.uuid4())
        answer = await send(gateway, "orders", {"body": body}, **{"Idempotency-Key": key})
        if fake.puts:
            return body, key, answer
    raise AssertionError("no put went to broker-c")


async def stored_on_the_real_brokers(gateway: httpx.AsyncClient) -> list[str]:
    return [m["body"] for b in ("broker-a", "broker-b") for m in (await pull(gateway, "orders", 0, b))["messages"]]


@pytest.fixture
async def fake(
    nameserver: ServedApp, gateway: httpx.AsyncClient, in_process_apps: dict[str, ASGIApp], request: Any
) -> RefusingBroker:
    fake = RefusingBroker(request.param[0], after_append=request.param[1])
    await with_broker_c(nameserver, gateway, in_process_apps, fake)
    return fake


@pytest.mark.parametrize("fake", [("not-master", True), ("replication-timeout", True)], indirect=True, ids=str)
async def test_a_maybe_stored_refusal_is_answered_as_it_is_and_a_repeat_with_its_key_goes_to_the_same_broker(
    gateway: httpx.AsyncClient, fake: RefusingBroker
) -> None:
    body, key, answer = await until_broker_c_gets_one(gateway, fake)
    (message_id,) = fake.puts[0]

    assert answer.status_code == REFUSALS[fake.refusal], answer.text
    assert problem_type(answer) == fake.refusal
    problem = answer.json()
    assert (problem["maybe_stored"], problem["broker"], problem["message_id"]) == (True, "broker-c", message_id)
    assert (problem["topic"], problem["queue_offset"]) == ("orders", 0)
    assert len(fake.puts) == 1, "sent once to broker-c"
    assert body not in await stored_on_the_real_brokers(gateway), "sent again to another broker"

    again = await send(gateway, "orders", {"body": body}, **{"Idempotency-Key": key})

    assert again.status_code == 201, again.text
    assert (again.json()["message_id"], again.json()["broker"]) == (message_id, "broker-c"), "the key was released"
    assert fake.puts == [[message_id], [message_id]], "the repeat went to broker-c, with the same message id"
    assert body not in await stored_on_the_real_brokers(gateway)


@pytest.mark.parametrize("fake", [("not-master", False)], indirect=True, ids=str)
async def test_a_not_master_refusal_before_anything_was_stored_is_sent_to_another_broker(
    gateway: httpx.AsyncClient, fake: RefusingBroker
) -> None:
    body, _, answer = await until_broker_c_gets_one(gateway, fake)

    assert answer.status_code == 201, answer.text
    assert answer.json()["broker"] != "broker-c"
    assert len(fake.puts) == 1
    assert body in await stored_on_the_real_brokers(gateway)
