"""Bodies a route does not take are refused from their headers (415); JSON too deep or too big before parsing."""

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from pydantic import BaseModel
from starlette.types import Message

from libs.errors import MalformedBody, PayloadTooLarge
from libs.http.app import binary_body, json_body, parse_json, service_app
from libs.http.json_shape import check_json_shape
from libs.settings import ServiceSettings
from tests.support.apps import in_process
from tests.support.gateway_calls import problem_type

JSON = {"content-type": "application/json"}
OCTETS = {"content-type": "application/octet-stream"}


class Thing(BaseModel):
    name: str
    tags: list[str] = []


def app_taking_bodies(data_dir: Path, **settings: Any) -> tuple[FastAPI, list[str]]:
    """A JSON route, a binary route, a FastAPI body-parameter route; `handled` lists the routes that ran."""
    handled: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield

    app = service_app("test", ServiceSettings(data_dir=data_dir, events_enabled=False, **settings), lifespan=lifespan)

    @app.post("/things", openapi_extra=json_body(Thing))
    async def put_thing(request: Request) -> dict[str, str]:
        handled.append("things")
        return {"name": parse_json(Thing, await request.body()).name}

    @app.post("/records", openapi_extra=binary_body())
    async def put_records(request: Request) -> dict[str, int]:
        handled.append("records")
        return {"size": len(await request.body())}

    @app.put("/typed/{name}")
    async def put_typed(name: str, thing: Thing) -> dict[str, str]:
        handled.append("typed")
        return {"name": thing.name}

    @app.post("/actions/run")
    async def run() -> dict[str, bool]:
        handled.append("run")
        return {"ran": True}

    return app, handled


@pytest.fixture
def app_and_handled(tmp_path: Path) -> tuple[FastAPI, list[str]]:
    return app_taking_bodies(tmp_path)


@pytest.fixture
async def client(app_and_handled: tuple[FastAPI, list[str]]) -> AsyncIterator[httpx.AsyncClient]:
    async for client in in_process(app_and_handled[0]):
        yield client


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
async def test_a_body_a_browser_may_send_unasked_is_refused_on_a_json_route(
    client: httpx.AsyncClient, app_and_handled: tuple[FastAPI, list[str]], content_type: str
) -> None:
    answer = await client.post("/things", content=b'{"name": "x"}', headers={"content-type": content_type})

    assert answer.status_code == 415, answer.text
    assert problem_type(answer) == "unsupported-media-type"
    problem = answer.json()
    assert (problem["sent"], problem["accepted"]) == (content_type, ["application/json"])
    assert problem["detail"] == f"the body is {content_type!r}; POST /things takes application/json"
    assert app_and_handled[1] == []


async def test_a_body_without_a_content_type_is_refused(
    client: httpx.AsyncClient, app_and_handled: tuple[FastAPI, list[str]]
) -> None:
    answer = await client.post("/things", content=b'{"name": "x"}')

    assert answer.status_code == 415, answer.text
    assert answer.json()["detail"] == "the body has no Content-Type; POST /things takes application/json"
    assert app_and_handled[1] == []


async def test_routes_taking_json_body_parameters_refuse_other_types_too(client: httpx.AsyncClient) -> None:
    refused = await client.put("/typed/a", content=b'{"name": "x"}', headers={"content-type": "text/plain"})
    taken = await client.put("/typed/a", json={"name": "x"})

    assert (refused.status_code, taken.status_code) == (415, 200)


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "application/merge-patch+json"]
)
async def test_json_is_taken_with_a_utf8_charset_or_a_json_suffix(client: httpx.AsyncClient, content_type: str) -> None:
    answer = await client.post("/things", content=b'{"name": "x"}', headers={"content-type": content_type})

    assert (answer.status_code, answer.json()) == (200, {"name": "x"})


async def test_json_in_another_charset_is_refused(client: httpx.AsyncClient) -> None:
    answer = await client.post(
        "/things", content=b'{"name": "x"}', headers={"content-type": "application/json; charset=latin-1"}
    )

    assert answer.status_code == 415
    assert answer.json()["detail"] == "the body is 'application/json; charset=latin-1'; JSON bodies are UTF-8"


async def test_a_post_without_a_body_needs_no_content_type(client: httpx.AsyncClient) -> None:
    answer = await client.post("/actions/run")

    assert (answer.status_code, answer.json()) == (200, {"ran": True})


async def test_a_binary_route_takes_octets_and_refuses_json(client: httpx.AsyncClient) -> None:
    taken = await client.post("/records", content=b"\x00\x01\x02", headers=OCTETS)
    refused = await client.post("/records", content=b"{}", headers=JSON)
    octets_to_json = await client.post("/things", content=b"\x00", headers=OCTETS)

    assert (taken.status_code, taken.json()) == (200, {"size": 3})
    assert (refused.status_code, refused.json()["accepted"]) == (415, ["application/octet-stream"])
    assert (octets_to_json.status_code, octets_to_json.json()["accepted"]) == (415, ["application/json"])


async def test_a_chunked_body_is_held_to_its_content_type_too(client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"name": '
        yield b'"x"}'

    refused = await client.post("/things", content=chunks(), headers={"content-type": "text/plain"})

    assert refused.status_code == 415


async def test_the_refusal_comes_before_the_body_is_read(app_and_handled: tuple[FastAPI, list[str]]) -> None:
    app = app_and_handled[0]
    sent: list[Message] = []
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/things",
        "raw_path": b"/things",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"text/plain"), (b"content-length", b"8000000")],
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
        "state": {},
    }

    async def receive() -> Message:
        raise AssertionError("the body was read")

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)

    assert sent[0]["status"] == 415


async def test_json_nested_deeper_than_max_json_depth_is_a_malformed_body(client: httpx.AsyncClient) -> None:
    deep = b'{"name": "x", "tags": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"

    answer = await client.post("/things", content=deep, headers=JSON)
    typed = await client.put("/typed/a", content=deep, headers=JSON)

    assert (answer.status_code, problem_type(answer)) == (400, "malformed-body")
    assert answer.json()["detail"] == "the JSON body nests deeper than 32 levels (max_json_depth)"
    assert (typed.status_code, problem_type(typed)) == (400, "malformed-body")


async def test_json_with_more_items_than_max_json_items_is_refused_before_parsing(tmp_path: Path) -> None:
    app, handled = app_taking_bodies(tmp_path, max_json_items=100)
    many = json.dumps({"name": "x", "tags": [str(i) for i in range(101)]}).encode()
    async for client in in_process(app):
        answer = await client.post("/things", content=many, headers=JSON)

    assert (answer.status_code, problem_type(answer)) == (413, "payload-too-large")
    assert answer.json()["limit"] == 100
    assert "max_json_items" in answer.json()["detail"]
    assert handled == []


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps({"body": "a, b, [c], {d}, " * 10_000, "tags": []}).encode(),  # structure inside a string
        json.dumps({"body": 'quoted \\" , [ { ' * 5_000}).encode(),  # escaped quotes and backslashes
        b'"unterminated, [[[[' + b"," * 1_000,  # not JSON: left to the parser to say where
    ],
)
def test_characters_inside_strings_are_not_counted(raw: bytes) -> None:
    check_json_shape(raw, max_depth=3, max_items=10)


def test_a_huge_object_is_refused_at_its_limit() -> None:
    raw = b'{"properties": {' + b",".join(b'"%x":""' % i for i in range(700_000)) + b"}}"

    with pytest.raises(PayloadTooLarge):
        check_json_shape(raw, max_depth=32, max_items=65_536)
    with pytest.raises(MalformedBody):
        check_json_shape(b"[" * 33 + b"]" * 33, max_depth=32, max_items=65_536)
    check_json_shape(b"[" * 32 + b"]" * 32, max_depth=32, max_items=65_536)
