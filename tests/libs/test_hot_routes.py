"""The hot path (libs.http.hot_routes): the FastAPI route's endpoint, called without FastAPI's request cycle."""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.routing import APIRoute

from libs.errors import Forbidden, InvalidTopicName
from libs.http.hot_routes import HotRoutesMiddleware
from libs.names import validate_topic_name

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
async def put_thing(topic: Topic, request: Request, count: int = 1) -> Response:
    body = await request.body()
    if body == b"boom":
        raise RuntimeError("a bug")
    return Response(f"{topic}:{len(body)}:{count}".encode(), status_code=201, media_type="text/plain")


@router.post("/topics/{topic}/things:many", operation_id="putThings")
async def put_things(topic: Topic) -> Response:
    return Response(f"many {topic}".encode(), media_type="text/plain")


def _bind(request: Request) -> dict[str, Any]:
    calls.append("hot")
    return {"topic": validate_topic_name(request.path_params["topic"]), "request": request}


def make_app(hot: dict[str, Any]) -> FastAPI:
    from libs.problem import install_problem_handlers

    app = FastAPI()
    install_problem_handlers(app)
    app.include_router(router)
    seen: list[str] = []

    class RouteLabel:
        """What the request metrics read: the matched route's path template."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await self.inner(scope, receive, send)
            seen.append(getattr(scope.get("route"), "path", "unmatched"))

    app.add_middleware(HotRoutesMiddleware, routes=app.router.routes, binders=hot)
    app.add_middleware(RouteLabel)
    app.state.seen = seen
    return app


@pytest.fixture
def client() -> httpx.AsyncClient:
    calls.clear()
    app = make_app({"putThing": _bind})
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def test_a_hot_route_runs_its_endpoint_without_the_dependency_tree(client: httpx.AsyncClient) -> None:
    answer = await client.post("/topics/orders/things", content=b"12345", headers={"x-allowed": "yes"})
    assert (answer.status_code, answer.text) == (201, "orders:5:1")
    assert calls == ["guard", "hot"]  # the guard ran, the binder bound; FastAPI's dependency did not run


async def test_routes_it_does_not_name_go_through_fastapi(client: httpx.AsyncClient) -> None:
    answer = await client.post("/topics/orders/things:many", headers={"x-allowed": "yes"})
    assert (answer.status_code, answer.text) == (200, "many orders")
    assert calls == ["guard", "dependency"]


async def test_the_metrics_see_the_route_template(client: httpx.AsyncClient) -> None:
    app: Any = client._transport.app  # type: ignore[attr-defined]
    await client.post("/topics/orders/things", content=b"x", headers={"x-allowed": "yes"})
    await client.post("/topics/orders/things:many", headers={"x-allowed": "yes"})
    assert app.state.seen == ["/topics/{topic}/things", "/topics/{topic}/things:many"]


async def test_the_guard_refuses_before_anything_is_bound(client: httpx.AsyncClient) -> None:
    answer = await client.post("/topics/orders/things", content=b"x")
    assert answer.status_code == 403
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["detail"] == "not allowed here"
    assert calls == []


@pytest.mark.parametrize("hot", [True, False], ids=["hot", "fastapi"])
async def test_errors_are_the_same_problems_on_both_paths(hot: bool) -> None:
    calls.clear()
    app = make_app({"putThing": _bind} if hot else {})
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://test"
    ) as client:
        bad_name = await client.post("/topics/no%20spaces/things", content=b"x", headers={"x-allowed": "yes"})
        assert bad_name.status_code == InvalidTopicName.status
        assert bad_name.json()["type"] == InvalidTopicName.problem_type()
        assert bad_name.json()["instance"] == "/topics/no spaces/things"
        bug = await client.post("/topics/orders/things", content=b"boom", headers={"x-allowed": "yes"})
        assert bug.status_code == 500
        assert bug.json()["detail"] == "an unexpected error occurred; the service log has the details"
    assert ("hot" in calls) == hot


async def test_a_hot_route_naming_an_unknown_operation_fails_loudly() -> None:
    app = make_app({"noSuchOperation": _bind})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        with pytest.raises(RuntimeError, match="noSuchOperation"):
            await client.post("/topics/orders/things", content=b"x")
