import httpx
import pytest

from gateway.app import create_app
from gateway.settings import GatewaySettings
from libs.http.app import installed_version
from tests.support.apps import in_process
from tests.support.gateway_calls import problem_type, register_silent_broker
from tests.support.in_process import InProcessApp
from tests.support.serving import ServedApp, free_port


async def test_put_creates_the_topic_on_every_broker(gateway: httpx.AsyncClient) -> None:
    created = await gateway.put("/v1/topics/orders")

    assert created.status_code == 201
    body = created.json()
    assert body["topic"] == "orders"
    assert body["message_type"] == "NORMAL"
    assert body["queues"] == 16
    assert [b["broker"] for b in body["brokers"]] == ["broker-a", "broker-b"]
    assert [q["queue_id"] for q in body["brokers"][0]["queues"]] == list(range(8))


async def test_put_again_updates_and_answers_200(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/orders")
    updated = await gateway.put("/v1/topics/orders", json={"queues": 2, "message_type": "FIFO"})

    assert updated.status_code == 200
    described = (await gateway.get("/v1/topics/orders")).json()
    assert described["message_type"] == "FIFO"
    assert described["queues"] == 4


async def test_list_shows_user_topics(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/orders", json={"queues": 4})
    await gateway.put("/v1/topics/audit", json={"queues": 1})

    listed = (await gateway.get("/v1/topics")).json()["topics"]

    assert [(t["topic"], t["queues"], t["brokers"]) for t in listed] == [
        ("audit", 2, ["broker-a", "broker-b"]),
        ("orders", 8, ["broker-a", "broker-b"]),
    ]


async def test_delete_removes_the_topic(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/orders")
    assert (await gateway.get("/v1/topics/orders")).status_code == 200

    assert (await gateway.delete("/v1/topics/orders")).status_code == 204

    gone = await gateway.get("/v1/topics/orders")
    assert gone.status_code == 404
    assert problem_type(gone) == "topic-not-found"
    assert problem_type(await gateway.delete("/v1/topics/orders")) == "topic-not-found"


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/v1/topics/bad%20name", "invalid-topic-name"),
        ("/v1/topics/" + "x" * 128, "invalid-topic-name"),
        ("/v1/topics/%25RETRY%25group", "invalid-topic-name"),
        ("/v1/topics/RMQ_SYS_TRANS_HALF_TOPIC", "reserved-topic-name"),
    ],
)
async def test_bad_topic_names_are_400(gateway: httpx.AsyncClient, path: str, kind: str) -> None:
    answer = await gateway.put(path)
    assert answer.status_code == 400
    assert problem_type(answer) == kind


async def test_bad_bodies_are_clear_problems(gateway: httpx.AsyncClient) -> None:
    malformed = await gateway.put(
        "/v1/topics/orders", content=b'{"queues": ', headers={"content-type": "application/json"}
    )
    assert malformed.status_code == 400
    assert problem_type(malformed) == "malformed-body"

    too_many = await gateway.put("/v1/topics/orders", json={"queues": 5000})
    assert too_many.status_code == 422
    assert problem_type(too_many) == "validation-failed"
    assert too_many.json()["errors"][0]["location"] == "body.queues"

    unknown_type = await gateway.put("/v1/topics/orders", json={"message_type": "URGENT"})
    assert unknown_type.status_code == 422


async def test_a_silent_broker_shows_in_describe_and_fails_put(
    gateway: httpx.AsyncClient, nameserver: ServedApp
) -> None:
    await gateway.put("/v1/topics/orders")
    address = await register_silent_broker(nameserver, "orders")

    described = (await gateway.get("/v1/topics/orders")).json()
    assert [(b["broker"], b["available"]) for b in described["brokers"]] == [
        ("broker-a", True),
        ("broker-b", True),
        ("broker-c", False),
    ]

    answer = await gateway.put("/v1/topics/audit")
    assert answer.status_code == 503
    assert problem_type(answer) == "broker-unavailable"
    assert answer.json()["brokers"] == ["broker-c"]
    assert f"broker broker-c at {address} did not answer" in answer.json()["detail"]


async def test_a_stale_cached_route_is_refreshed_on_a_routing_error(
    gateway: httpx.AsyncClient, brokers: dict[str, InProcessApp]
) -> None:
    await gateway.put("/v1/topics/orders")
    assert len((await gateway.get("/v1/topics/orders")).json()["brokers"]) == 2

    async with brokers["broker-b"].client() as client:
        await client.delete("/internal/topics/orders")

    described = (await gateway.get("/v1/topics/orders")).json()
    assert [b["broker"] for b in described["brokers"]] == ["broker-a"]


async def test_nameserver_down_is_503() -> None:
    dead = f"127.0.0.1:{free_port()}"
    async for client in in_process(create_app(GatewaySettings(nameservers=[dead]))):
        answer = await client.get("/v1/topics")
        assert answer.status_code == 503
        assert problem_type(answer) == "nameserver-unavailable"
        assert dead in answer.json()["detail"]
        not_ready = await client.get("/readyz")
        assert not_ready.status_code == 503


async def test_gateway_is_ready_with_brokers(gateway: httpx.AsyncClient) -> None:
    ready = await gateway.get("/readyz")
    assert ready.json() == {
        "status": "ready",
        "ready": True,
        "service": "gateway",
        "checks": {"nameservers": "ok", "brokers": "ok"},
    }
    health = (await gateway.get("/healthz")).json()
    assert health == {"status": "ok", "service": "gateway", "worker": "gateway", "version": installed_version()}
    metrics = await gateway.get("/metrics")
    assert 'route="/readyz"' in metrics.text
