from collections.abc import AsyncIterator

import httpx
import pytest

from services.nameserver.app import create_app
from services.nameserver.settings import NameserverSettings
from tests.support.apps import in_process
from tests.support.clock import FakeClock
from tests.support.waiting import eventually

PROBLEM = "application/problem+json"


def register_body(address: str = "127.0.0.1:10911", **topics: int) -> dict[str, object]:
    return {
        "cluster": "DefaultCluster",
        "address": address,
        "data_version": 1,
        "topics": [{"name": n, "read_queues": q, "write_queues": q} for n, q in topics.items()],
    }


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def client(clock: FakeClock) -> AsyncIterator[httpx.AsyncClient]:
    settings = NameserverSettings(scan_interval_seconds=0.01, broker_expiry_seconds=120)
    async for c in in_process(create_app(settings, clock=clock)):
        yield c


async def test_registered_broker_serves_routes(client: httpx.AsyncClient) -> None:
    answer = await client.put("/internal/brokers/broker-a/0", json=register_body(orders=8))
    assert answer.status_code == 200
    assert answer.json()["expires_after_ms"] == 120_000

    route = await client.get("/internal/routes/orders")
    assert route.status_code == 200
    assert route.json()["queues"][0] == {
        "broker_name": "broker-a",
        "read_queues": 8,
        "write_queues": 8,
        "perm": 6,
        "message_type": "NORMAL",
    }
    clusters = (await client.get("/internal/clusters")).json()
    assert clusters["clusters"][0]["name"] == "DefaultCluster"
    assert clusters["clusters"][0]["brokers"][0]["broker_name"] == "broker-a"


async def test_unknown_topic_is_a_problem_404(client: httpx.AsyncClient) -> None:
    answer = await client.get("/internal/routes/nothing")
    assert answer.status_code == 404
    assert answer.headers["content-type"] == PROBLEM
    assert answer.json()["type"] == "https://petrel.dev/problems/topic-not-found"
    assert "create it with PUT /v1/topics/nothing" in answer.json()["detail"]


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({**register_body(), "address": "no-port"}, "body.address"),
        ({**register_body(), "data_version": -1}, "body.data_version"),
        (register_body("127.0.0.1:10911", **{"bad name": 1}), "body.topics.0.name"),
        (register_body(orders=5000), "body.topics.0.read_queues"),
        ({**register_body(), "extra": 1}, "body.extra"),
    ],
)
async def test_register_payload_is_validated(client: httpx.AsyncClient, body: dict[str, object], where: str) -> None:
    answer = await client.put("/internal/brokers/broker-a/0", json=body)

    assert answer.status_code == 422
    problem = answer.json()
    assert problem["type"] == "https://petrel.dev/problems/validation-failed"
    assert where in [e["location"] for e in problem["errors"]]


async def test_invalid_broker_name_is_refused(client: httpx.AsyncClient) -> None:
    answer = await client.put("/internal/brokers/bad%20name/0", json=register_body())
    assert answer.status_code == 400
    assert "broker name 'bad name'" in answer.json()["detail"]


async def test_heartbeat_and_unregister(client: httpx.AsyncClient) -> None:
    unknown = await client.post("/internal/brokers/broker-a/0/heartbeat", json={"data_version": 1})
    assert unknown.json() == {"known": False, "in_sync": False}

    await client.put("/internal/brokers/broker-a/0", json=register_body(orders=8))
    known = await client.post("/internal/brokers/broker-a/0/heartbeat", json={"data_version": 1})
    assert known.json() == {"known": True, "in_sync": True}

    assert (await client.delete("/internal/brokers/broker-a/0")).status_code == 204
    assert (await client.get("/internal/routes/orders")).status_code == 404
    again = await client.delete("/internal/brokers/broker-a/0")
    assert again.status_code == 404
    assert again.json()["type"] == "https://petrel.dev/problems/broker-not-found"


async def test_expiry_scan_drops_a_silent_broker(client: httpx.AsyncClient, clock: FakeClock) -> None:
    await client.put("/internal/brokers/broker-a/0", json=register_body(orders=8))
    await client.put("/internal/brokers/broker-b/0", json=register_body("127.0.0.1:10912", orders=8))

    clock.advance(60)
    await client.post("/internal/brokers/broker-b/0/heartbeat", json={"data_version": 1})
    clock.advance(61)

    async def brokers_in_route() -> list[str]:
        route = (await client.get("/internal/routes/orders")).json()
        return [q["broker_name"] for q in route["queues"]]

    async def only_b_left() -> bool:
        return await brokers_in_route() == ["broker-b"]

    await eventually(only_b_left, "broker-a dropped from the route of orders")
