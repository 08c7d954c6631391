"""The hot path (libs.http.hot_routes): a route's endpoint called without FastAPI's stack, behind the same checks."""

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.routing import APIRoute
from pydantic import SecretStr

from libs.errors import Forbidden, InvalidTopicName
from libs.http.app import service_app
from libs.names import validate_topic_name
from libs.settings import ServiceSettings

TOKEN = "cluster-secret-of-thirty-two-bytes"
calls: list[str] = []


async def _dependency_topic(topic: str) -> str:
    calls.append("dependency")
    return validate_topic_name(topic)


Topic = Annotated[str, Depends(_dependency_topic)]


class GuardedRoute(APIRoute):
    """As the gateway's AuthorizedRoute: the handler runs inside a check, on both paths."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def guarded_handler(request: Request) -> Response:
            return await self.guarded(request, lambda: handler(request))

        return guarded_handler

    async def guarded(self, request: Request, call: Callable[[], Awaitable[Response]]) -> Response:
        if request.headers.get("x-allowed") != "yes":
            raise Forbidden("not allowed here")
        calls.append("guard")
        return await call()


router = APIRouter(route_class=GuardedRoute)


@router.post("/topics/{topic}/things", operation_id="putThing")
async def put_thing(topic: Topic, request: Request) -> Response:
    body = await request.body()
    if body == b'"boom"':
        raise RuntimeError("a bug")
    return Response(f"{topic}:{len(body)}".encode(), status_code=201, media_type="text/plain")


@router.post("/topics/{topic}/things:many", operation_id="putThings")
async def put_things(topic: Topic) -> Response:
    return Response(f"many {topic}".encode(), media_type="text/plain")


def _bind(request: Request) -> dict[str, Any]:
    calls.append("hot")
    return {"topic": validate_topic_name(request.path_params["topic"]), "request": request}


@contextlib.asynccontextmanager
async def no_resources(app: FastAPI) -> AsyncIterator[None]:
    yield


def make_app(hot_path: bool, binders: dict[str, Any] | None = None) -> FastAPI:
    settings = ServiceSettings(
        internal_token=SecretStr(TOKEN), events_enabled=False, hot_path=hot_path, max_json_depth=4
    )
    app = service_app(
        "testsvc", settings, lifespan=no_resources, max_body_bytes=1000, hot_routes=binders or {"putThing": _bind}
    )
    app.include_router(router)
    return app


def client_of(app: FastAPI) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")


ALLOWED = {"x-allowed": "yes", "x-petrel-internal-token": TOKEN, "content-type": "application/json"}


@pytest.fixture(params=[True, False], ids=["hot", "fastapi"])
async def both(request: pytest.FixtureRequest) -> AsyncIterator[tuple[httpx.AsyncClient, bool]]:
    calls.clear()
    async with client_of(make_app(request.param)) as client:
        yield client, request.param


async def test_a_hot_route_runs_its_endpoint_without_the_dependency_tree(
    both: tuple[httpx.AsyncClient, bool],
) -> None:
    client, hot = both
    answer = await client.post("/topics/orders/things", content=b'"12345"', headers=ALLOWED)
    assert (answer.status_code, answer.text) == (201, "orders:7")
    assert calls == (["guard", "hot"] if hot else ["guard", "dependency"])


async def test_routes_it_does_not_name_go_through_fastapi(both: tuple[httpx.AsyncClient, bool]) -> None:
    client, _ = both
    answer = await client.post("/topics/orders/things:many", headers=ALLOWED)
    assert (answer.status_code, answer.text) == (200, "many orders")
    assert calls == ["guard", "dependency"]


async def test_the_metrics_count_it_under_its_route_template(both: tuple[httpx.AsyncClient, bool]) -> None:
    client, _ = both
    await client.post("/topics/orders/things", content=b"1", headers=ALLOWED)
    await client.post("/topics/orders/things", content=b"1", headers=ALLOWED | {"x-allowed": "no"})
    metrics = (await client.get("/metrics")).text
    assert 'route="/topics/{topic}/things",service="testsvc",status="201"} 1.0' in metrics
    assert 'route="/topics/{topic}/things",service="testsvc",status="403"} 1.0' in metrics


@pytest.mark.parametrize(
    ("headers", "body", "status", "slug"),
    [
        ({"x-petrel-internal-token": "wrong"}, b"1", 401, "unauthorized"),
        ({"host": "evil.example"}, b"1", 400, "host-not-allowed"),
        ({"content-type": "text/plain"}, b"1", 415, "unsupported-media-type"),
        ({}, b"[" * 5 + b"]" * 5, 400, "malformed-body"),
        ({}, b'"' + b"x" * 1000 + b'"', 413, "payload-too-large"),
        ({"x-allowed": "no"}, b"1", 403, "forbidden"),
    ],
    ids=["token", "host", "media-type", "json-depth", "body-size", "route-guard"],
)
async def test_every_check_refuses_alike_on_both_paths(
    both: tuple[httpx.AsyncClient, bool], headers: dict[str, str], body: bytes, status: int, slug: str
) -> None:
    client, _ = both
    answer = await client.post("/topics/orders/things", content=body, headers=ALLOWED | headers)
    assert answer.status_code == status
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"].endswith("/" + slug)
    assert "hot" not in calls
    assert "dependency" not in calls


async def test_errors_are_the_same_problems_on_both_paths(both: tuple[httpx.AsyncClient, bool]) -> None:
    client, _ = both
    bad_name = await client.post("/topics/no%20spaces/things", content=b"1", headers=ALLOWED)
    assert bad_name.status_code == InvalidTopicName.status
    assert bad_name.json()["type"] == InvalidTopicName.problem_type()
    assert bad_name.json()["instance"] == "/topics/no spaces/things"
    bug = await client.post("/topics/orders/things", content=b'"boom"', headers=ALLOWED)
    assert bug.status_code == 500
    assert bug.json()["detail"] == "an unexpected error occurred; the service log has the details"


async def test_a_hot_route_naming_an_unknown_operation_stops_the_app_at_start() -> None:
    from asgi_lifespan import LifespanManager

    with pytest.raises(RuntimeError, match="hot routes name operations the app does not have: noSuchOperation"):
        async with LifespanManager(make_app(True, {"noSuchOperation": _bind})):
            pass
