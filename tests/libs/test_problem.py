"""Errors as RFC 9457 problem+json, and the frame every service app shares (service_app)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel, SecretStr

from libs.cluster_token import INTERNAL_TOKEN_HEADER
from libs.errors import PROBLEM_TYPE_BASE, CorruptRecord, PetrelError, TopicNotFound
from libs.http.app import installed_version, service_app
from libs.problem import error_response
from libs.settings import ServiceSettings

TOKEN = "cluster-secret-of-thirty-two-bytes"


class NewTopic(BaseModel):
    name: str
    queues: int


@contextlib.asynccontextmanager
async def no_resources(app: FastAPI) -> AsyncIterator[None]:
    yield


def build_app(*, token: str | None = None, public: bool = False, max_body_bytes: int = 1024) -> FastAPI:
    settings = ServiceSettings(internal_token=SecretStr(token) if token else None)
    app = service_app("testsvc", settings, lifespan=no_resources, public=public, max_body_bytes=max_body_bytes)
    app.state.calls = []

    @app.get("/topics/{topic}")
    async def get_topic(topic: str) -> dict[str, str]:
        app.state.calls.append(topic)
        raise TopicNotFound(f"topic {topic!r} does not exist")

    @app.post("/topics")
    async def create_topic(body: NewTopic) -> dict[str, Any]:
        app.state.calls.append(body.name)
        return body.model_dump()

    @app.get("/crash")
    async def crash() -> None:
        raise RuntimeError("database password is hunter2")

    @app.get("/corrupt")
    async def corrupt() -> None:
        raise CorruptRecord(4096, "CRC mismatch")

    return app


@contextlib.asynccontextmanager
async def client_for(app: FastAPI, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    # raise_app_exceptions=False: Starlette re-raises an unhandled error after answering 500.
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", headers=headers) as client:
        yield client


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem["type"] == f"https://petrel.dev/problems/{slug}"
    assert problem["status"] == status
    return problem


async def test_petrel_error_becomes_its_problem_type_with_detail_and_instance() -> None:
    async with client_for(build_app()) as client:
        response = await client.get("/topics/orders")
    assert_problem(response, 404, "topic-not-found")
    assert response.json() == {
        "type": "https://petrel.dev/problems/topic-not-found",
        "title": "Topic not found",
        "status": 404,
        "detail": "topic 'orders' does not exist",
        "instance": "/topics/orders",
    }


async def test_error_extensions_are_top_level_problem_members() -> None:
    async with client_for(build_app()) as client:
        problem = assert_problem(await client.get("/corrupt"), 500, "corrupt-record")
    assert (problem["detail"], problem["offset"]) == ("record at offset 4096: CRC mismatch", 4096)


async def test_malformed_json_is_a_400_naming_the_position() -> None:
    async with client_for(build_app()) as client:
        response = await client.post("/topics", content=b'{"name": ', headers={"content-type": "application/json"})
    problem = assert_problem(response, 400, "malformed-body")
    assert problem["detail"].startswith("the body is not valid JSON: ")
    assert problem["detail"].endswith(" at position 9")


async def test_schema_violation_is_a_422_listing_each_error() -> None:
    async with client_for(build_app()) as client:
        response = await client.post("/topics", json={"name": "orders", "queues": "many"})
    problem = assert_problem(response, 422, "validation-failed")
    assert [(e["location"], e["type"]) for e in problem["errors"]] == [("body.queues", "int_parsing")]
    assert problem["detail"] == f"body.queues: {problem['errors'][0]['message']}"


async def test_valid_body_reaches_the_endpoint() -> None:
    async with client_for(build_app()) as client:
        response = await client.post("/topics", json={"name": "orders", "queues": 4})
    assert (response.status_code, response.json()) == (200, {"name": "orders", "queues": 4})


async def test_unknown_path_is_a_404_not_found_problem() -> None:
    async with client_for(build_app()) as client:
        problem = assert_problem(await client.get("/no/such/thing"), 404, "not-found")
    assert problem["detail"] == "no route for GET /no/such/thing"


async def test_wrong_method_is_a_405_problem() -> None:
    async with client_for(build_app()) as client:
        assert_problem(await client.delete("/topics"), 405, "method-not-allowed")


async def test_unexpected_exception_is_a_500_without_internals(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="libs.problem"):
        async with client_for(build_app()) as client:
            response = await client.get("/crash")
    assert_problem(response, 500, "internal-error")
    assert response.json()["detail"] == "an unexpected error occurred; the service log has the details"
    assert "hunter2" not in response.text
    assert "Traceback" not in response.text
    assert "database password is hunter2" in caplog.text, "the details belong in the service log"


async def test_declared_body_over_the_limit_is_refused_before_the_endpoint_runs() -> None:
    app = build_app(max_body_bytes=16)
    async with client_for(app) as client:
        response = await client.post("/topics", content=b"x" * 17, headers={"content-type": "application/json"})
    problem = assert_problem(response, 413, "payload-too-large")
    assert (problem["detail"], problem["limit"]) == ("the body is 17 bytes; the limit is 16", 16)
    assert app.state.calls == []


async def test_chunked_body_over_the_limit_is_refused_before_the_endpoint_runs() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"x" * 10

    app = build_app(max_body_bytes=16)
    async with client_for(app) as client:
        response = await client.post("/topics", content=chunks(), headers={"content-type": "application/json"})
    problem = assert_problem(response, 413, "payload-too-large")
    assert problem["detail"].startswith("the body is at least ")
    assert problem["detail"].endswith(" bytes; the limit is 16")
    assert app.state.calls == []


async def test_chunked_body_within_the_limit_reaches_the_endpoint_whole() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"name": "or'
        yield b'ders", "queues": 2}'

    async with client_for(build_app(max_body_bytes=64)) as client:
        response = await client.post("/topics", content=chunks(), headers={"content-type": "application/json"})
    assert (response.status_code, response.json()) == (200, {"name": "orders", "queues": 2})


@pytest.mark.parametrize("headers", [{}, {"x-petrel-internal-token": "wrong"}], ids=["missing", "wrong"])
async def test_internal_service_refuses_a_call_without_the_token(headers: dict[str, str]) -> None:
    app = build_app(token=TOKEN)
    async with client_for(app, **headers) as client:
        problem = assert_problem(await client.get("/topics/orders"), 401, "unauthorized")
    assert problem["detail"] == "missing or wrong x-petrel-internal-token header"
    assert app.state.calls == []


async def test_internal_service_accepts_a_call_with_the_token() -> None:
    async with client_for(build_app(token=TOKEN), **{"x-petrel-internal-token": TOKEN}) as client:
        assert_problem(await client.get("/topics/orders"), 404, "topic-not-found")


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
async def test_ops_endpoints_stay_open_without_the_token(path: str) -> None:
    async with client_for(build_app(token=TOKEN)) as client:
        assert (await client.get(path)).status_code == 200


async def test_public_service_does_not_ask_for_the_internal_token() -> None:
    async with client_for(build_app(token=TOKEN, public=True)) as client:
        assert_problem(await client.get("/topics/orders"), 404, "topic-not-found")


async def test_healthz_names_the_service_and_its_version() -> None:
    async with client_for(build_app()) as client:
        response = await client.get("/healthz")
    assert response.json() == {"status": "ok", "service": "testsvc", "version": installed_version()}


async def test_readyz_is_503_while_a_check_fails() -> None:
    async def redis_down(request: object) -> dict[str, str]:
        return {"redis": "connection refused", "disk": "ok"}

    settings = ServiceSettings(internal_token=None)
    app = service_app("testsvc", settings, lifespan=no_resources, readiness=redis_down)
    async with client_for(app) as client:
        response = await client.get("/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "not ready",
        "ready": False,
        "service": "testsvc",
        "checks": {"redis": "connection refused", "disk": "ok"},
    }


async def test_readyz_tells_what_is_wrong_only_to_a_caller_with_the_cluster_token() -> None:
    async def redis_down(request: object) -> dict[str, str]:
        return {"redis": "Redis at redis://:***@10.20.0.9:6379/0 refused the credentials"}

    settings = ServiceSettings(internal_token=SecretStr(TOKEN))
    app = service_app("testsvc", settings, lifespan=no_resources, readiness=redis_down)
    async with client_for(app) as stranger, client_for(app, **{INTERNAL_TOKEN_HEADER: TOKEN}) as peer:
        told = await stranger.get("/readyz")
        assert (told.status_code, told.json()) == (503, {"status": "not ready"})
        guessed = await stranger.get("/readyz", headers={INTERNAL_TOKEN_HEADER: "x" * len(TOKEN)})
        assert guessed.json() == {"status": "not ready"}
        assert (await peer.get("/readyz")).json()["checks"] == {"redis": (await redis_down(None))["redis"]}


async def test_metrics_count_requests_by_route_template() -> None:
    async with client_for(build_app()) as client:
        await client.get("/topics/orders")
        await client.get("/topics/payments")
        await client.get("/nowhere")
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    lines = response.text.splitlines()
    labels = 'method="GET",route="/topics/{topic}",service="testsvc",status="404"'
    assert f"petrel_http_requests_total{{{labels}}} 2.0" in lines
    assert 'petrel_http_requests_total{method="GET",route="unmatched",service="testsvc",status="404"} 1.0' in lines


def all_error_classes() -> Iterator[type[PetrelError]]:
    pending: list[type[PetrelError]] = [PetrelError]
    while pending:
        cls = pending.pop()
        yield cls
        pending.extend(cls.__subclasses__())


def test_every_error_class_is_registered_under_its_own_slug() -> None:
    classes = list(all_error_classes())
    assert {cls.slug: cls for cls in classes} == PetrelError.by_slug
    assert len({cls.slug for cls in classes}) == len(classes)


def test_a_second_class_with_a_used_slug_is_refused() -> None:
    with pytest.raises(TypeError, match=r"^problem slug 'topic-not-found' is used twice$"):

        class Duplicate(PetrelError):
            slug = "topic-not-found"

    assert PetrelError.by_slug["topic-not-found"] is TopicNotFound


@pytest.mark.parametrize("cls", list(all_error_classes()), ids=lambda cls: cls.slug)
def test_problem_type_maps_back_to_its_class(cls: type[PetrelError]) -> None:
    assert PetrelError.from_problem_type(cls.problem_type()) is cls


@pytest.mark.parametrize("problem_type", ["about:blank", PROBLEM_TYPE_BASE + "no-such-slug", "topic-not-found"])
def test_foreign_problem_type_maps_to_no_class(problem_type: str) -> None:
    assert PetrelError.from_problem_type(problem_type) is None


def rebuilt_from_the_wire(exc: PetrelError) -> PetrelError:
    """What a client does with the problem+json a peer answered for `exc`."""
    problem = json.loads(bytes(error_response(exc, "/segments/0").body))
    cls = PetrelError.from_problem_type(problem["type"])
    assert cls is not None, f"the problem type {problem['type']} maps to no error class"
    extensions = {k: v for k, v in problem.items() if k not in {"type", "title", "status", "detail", "instance"}}
    return cls.rebuild(problem["detail"], extensions)


def test_corrupt_record_rebuilt_from_its_problem_keeps_class_detail_and_extensions() -> None:
    rebuilt = rebuilt_from_the_wire(CorruptRecord(4096, "CRC mismatch"))
    assert type(rebuilt) is CorruptRecord
    assert rebuilt.detail == "record at offset 4096: CRC mismatch"
    assert str(rebuilt) == "record at offset 4096: CRC mismatch"
    assert rebuilt.extensions == {"offset": 4096}


def test_corrupt_record_rebuilt_from_its_problem_keeps_its_offset_attribute() -> None:
    rebuilt = rebuilt_from_the_wire(CorruptRecord(4096, "CRC mismatch"))
    assert isinstance(rebuilt, CorruptRecord)
    assert getattr(rebuilt, "offset", "<missing>") == 4096
