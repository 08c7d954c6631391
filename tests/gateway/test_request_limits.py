"""Limits before work at the gateway: media types, JSON shape, and the limits of a message sent."""

from typing import Any

import httpx
import pytest

from tests.support.gateway_calls import problem_type, send
from tests.support.in_process import InProcessApp
from tests.support.serving import ServedApp

DEEP = b'{"body": "x", "properties": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"


@pytest.fixture
def gateway_overrides() -> dict[str, Any]:
    return {"max_message_bytes": 1024}


async def assert_no_topic(gateway: httpx.AsyncClient, topic: str) -> None:
    """Nothing was stored: the send that would have created the topic never ran."""
    assert (await gateway.get(f"/v1/topics/{topic}")).status_code == 404


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
async def test_a_send_a_browser_may_make_unasked_is_refused_and_stores_nothing(
    gateway: httpx.AsyncClient, content_type: str
) -> None:
    answer = await gateway.post(
        "/v1/topics/csrf/messages", content=b'{"body": "x"}', headers={"content-type": content_type}
    )

    assert (answer.status_code, problem_type(answer)) == (415, "unsupported-media-type")
    assert answer.json()["accepted"] == ["application/json"]
    await assert_no_topic(gateway, "csrf")


async def test_a_send_without_a_content_type_is_refused(gateway: httpx.AsyncClient) -> None:
    answer = await gateway.post("/v1/topics/untyped/messages", content=b'{"body": "x"}')

    assert answer.status_code == 415
    await assert_no_topic(gateway, "untyped")


async def test_700000_properties_are_refused_before_they_are_parsed(gateway: httpx.AsyncClient) -> None:
    properties = b",".join(b'"%x":""' % i for i in range(700_000))
    raw = b'{"body": "x", "properties": {' + properties + b"}}"
    assert len(raw) < 8 * 1024 * 1024  # within the body limit: the shape check refuses it

    answer = await gateway.post("/v1/topics/flood/messages", content=raw, headers={"content-type": "application/json"})

    assert (answer.status_code, problem_type(answer)) == (413, "payload-too-large")
    assert "max_json_items" in answer.json()["detail"]
    await assert_no_topic(gateway, "flood")


async def test_deep_json_is_a_malformed_body_on_every_json_route_of_the_gateway(gateway: httpx.AsyncClient) -> None:
    spec = (await gateway.get("/openapi.json")).json()
    routes = [
        (method, path)
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
        if "application/json" in operation.get("requestBody", {}).get("content", {})
    ]
    assert len(routes) > 10
    for method, path in routes:
        url = path.replace("{", "").replace("}", "")  # every path parameter named after itself
        answer = await gateway.request(method, url, content=DEEP, headers={"content-type": "application/json"})
        assert (answer.status_code, problem_type(answer)) == (400, "malformed-body"), (method, path, answer.text)


async def test_deep_json_is_a_malformed_body_on_every_json_route_of_a_broker_and_the_nameserver(
    brokers: dict[str, InProcessApp], nameserver: ServedApp
) -> None:
    async with brokers["broker-a"].client() as broker, httpx.AsyncClient(base_url=nameserver.url) as names:
        for client in (broker, names):
            spec = (await client.get("/openapi.json")).json()
            for path, operations in spec["paths"].items():
                for method, operation in operations.items():
                    if "application/json" not in operation.get("requestBody", {}).get("content", {}):
                        continue
                    url = path.replace("{", "").replace("}", "")
                    answer = await client.request(
                        method, url, content=DEEP, headers={"content-type": "application/json"}
                    )
                    assert answer.status_code == 400, (method, path, answer.text)
                    assert problem_type(answer) == "malformed-body", (method, path, answer.text)


@pytest.mark.parametrize(
    ("message", "limit"),
    [
        ({"properties": {f"p{i}": "v" for i in range(65)}}, "at most 64 items"),
        ({"properties": {"p" * 129: "v"}}, "at most 128 characters"),
        ({"properties": {"": "v"}}, "at least 1 character"),
        ({"properties": {"p": "v" * 16_385}}, "at most 16384 characters"),
        ({"keys": [f"k{i}" for i in range(65)]}, "at most 64 items"),
        ({"keys": ["k" * 129]}, "at most 128 characters"),
    ],
)
async def test_each_message_limit_is_a_422_naming_it(
    gateway: httpx.AsyncClient, message: dict[str, Any], limit: str
) -> None:
    answer = await send(gateway, "limits", {"body": "x", **message})

    assert (answer.status_code, problem_type(answer)) == (422, "validation-failed")
    assert limit in answer.json()["detail"]
    await assert_no_topic(gateway, "limits")


async def test_a_message_body_over_max_message_bytes_is_a_413_naming_it(gateway: httpx.AsyncClient) -> None:
    answer = await send(gateway, "large", {"body": "x" * 1025})
    batch = await gateway.post("/v1/topics/large/messages:batch", json={"messages": [{"body": "x" * 1025}]})

    assert (answer.status_code, problem_type(answer)) == (413, "payload-too-large")
    assert answer.json()["detail"] == "the message body is 1025 bytes; the limit is 1024 (max_message_bytes)"
    assert batch.json()["results"][0]["error"]["status"] == 413
    assert (await send(gateway, "large", {"body": "x" * 1024})).status_code == 201


async def test_the_spec_shows_the_message_limits(gateway: httpx.AsyncClient) -> None:
    schemas = (await gateway.get("/openapi.json")).json()["components"]["schemas"]
    properties = schemas["PropertiesToSend"]
    keys = schemas["SendMessage"]["properties"]["keys"]

    assert properties["maxProperties"] == 64
    assert properties["propertyNames"] == {"maxLength": 128, "minLength": 1}
    assert properties["additionalProperties"]["maxLength"] == 16_384
    assert (keys["maxItems"], keys["items"]["maxLength"]) == (64, 128)
