"""A gateway on loopback with auth off answers only this machine: loopback names, no other site's pages, no proxy.

A web page can make a developer's browser call 127.0.0.1 (a page of another site) or
rebind its own name to 127.0.0.1 (then the browser sends that name in Host); a proxy in
front makes a loopback gateway reachable from everywhere. Each is refused before any
body is read, on the hot path and through FastAPI, and naming a host others reach turns
API keys on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.settings import GatewaySettings
from tests.support.api_keys import bearer, issue_key
from tests.support.apps import in_process
from tests.support.gateway_calls import problem_type
from tests.support.serving import free_port

REBINDING = "rebind.attacker.example:8080"


@pytest.fixture(params=[True, False], ids=["hot", "fastapi"])
def hot_path(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
async def open_gateway(tmp_path: Path, hot_path: bool) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway with auth off on loopback (the default) and no cluster behind it: what is refused is refused first."""
    settings = GatewaySettings(data_dir=tmp_path, hot_path=hot_path, nameservers=[f"127.0.0.1:{free_port()}"])
    async for client in in_process(create_app(settings)):
        yield client


WHAT_A_PAGE_WANTS: tuple[tuple[str, str, dict[str, Any] | None], ...] = (
    ("POST", "/v1/topics/fresh/messages", {"body": "x"}),
    ("POST", "/v1/groups/billing/topics/orders/receive", {"max_messages": 1, "wait_seconds": 0}),
    ("GET", "/v1/topics/orders/queues/0/messages", None),
    ("DELETE", "/v1/topics/orders", None),
    ("POST", "/v1/keys", {"name": "mine", "allow": ["admin", "pub", "sub"]}),
    ("GET", "/metrics", None),
)


async def test_a_rebinding_page_gets_nothing_done(gateway: httpx.AsyncClient) -> None:
    assert (await gateway.put("/v1/topics/orders")).status_code in (200, 201)

    for method, path, body in WHAT_A_PAGE_WANTS:
        answer = await gateway.request(method, path, json=body, headers={"host": REBINDING})

        assert answer.status_code == 400, (path, answer.text)
        assert problem_type(answer) == "host-not-allowed"
        problem = answer.json()
        assert (problem["host"], problem["setting"]) == (REBINDING, "PETREL_GATEWAY_PUBLIC_URL")
        assert "answers only to localhost and loopback addresses" in problem["detail"]
    assert (await gateway.get("/v1/topics/fresh")).status_code == 404
    assert (await gateway.get("/v1/topics/orders")).status_code == 200
    assert (await gateway.get("/v1/keys")).json() == {"keys": []}


NOT_LOOPBACK = (
    "rebind.attacker.example",
    "127.0.0.1.nip.io:8080",
    "localhost.attacker.example:8080",
    "app.localhost:8080",
    "0.0.0.0:8080",
    "10.0.0.12:8080",
    "[fe80::1]:8080",
)
LOOPBACK = (
    "127.0.0.1",
    "127.0.0.1:8080",
    "127.3.2.1:8080",
    "localhost",
    "localhost:8080",
    "LocalHost.:8080",
    "[::1]:8080",
)


async def test_only_loopback_names_are_answered(open_gateway: httpx.AsyncClient) -> None:
    for host in NOT_LOOPBACK:
        answer = await open_gateway.post("/v1/topics/orders/messages", json={"body": "x"}, headers={"host": host})
        assert (answer.status_code, problem_type(answer)) == (400, "host-not-allowed"), host
    for host in LOOPBACK:
        answer = await open_gateway.get("/v1/keys", headers={"host": host})
        assert answer.status_code == 200, (host, answer.text)


@pytest.mark.parametrize(
    "headers",
    [
        {"sec-fetch-site": "cross-site"},
        {"origin": "https://attacker.example"},
        {"origin": "http://rebind.attacker.example:8080", "sec-fetch-site": "same-site"},
        {"origin": "null"},
    ],
    ids=["sec-fetch-site", "origin", "origin-same-site", "null-origin"],
)
async def test_a_page_of_another_site_is_refused(open_gateway: httpx.AsyncClient, headers: dict[str, str]) -> None:
    for method, path, body in (
        ("POST", "/v1/topics/orders/messages", {"body": "x"}),  # a hot route
        ("POST", "/v1/keys", {"name": "mine", "allow": ["admin", "pub", "sub"]}),
    ):
        answer = await open_gateway.request(method, path, json=body, headers=headers)
        assert answer.status_code == 403, answer.text
        assert problem_type(answer) == "cross-site-request"
        assert "another site" in answer.json()["detail"]
    assert (await open_gateway.get("/v1/keys")).json() == {"keys": []}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"sec-fetch-site": "same-origin", "origin": "http://127.0.0.1:8080"},
        {"sec-fetch-site": "same-site", "origin": "http://localhost:3000"},
        {"sec-fetch-site": "none"},
        {"origin": "http://[::1]:5173"},
    ],
    ids=["curl", "same-origin", "localhost-dev-server", "typed-url", "ipv6-loopback"],
)
async def test_this_machines_pages_and_clients_without_a_browser_pass(
    open_gateway: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    assert (await open_gateway.get("/v1/keys", headers=headers)).status_code == 200


@pytest.mark.parametrize(
    "header", [("x-forwarded-for", "203.0.113.9"), ("forwarded", "for=203.0.113.9"), ("via", "1.1 proxy")]
)
async def test_a_call_through_a_proxy_is_refused_while_auth_is_off(
    open_gateway: httpx.AsyncClient, header: tuple[str, str]
) -> None:
    answer = await open_gateway.get("/v1/keys", headers=dict([header]))
    assert answer.status_code == 400, answer.text
    assert problem_type(answer) == "host-not-allowed"
    assert "through a proxy" in answer.json()["detail"]
    assert "PETREL_GATEWAY_PUBLIC_URL" in answer.json()["detail"]


# Naming a host others reach


@pytest.mark.parametrize(
    ("named", "why"),
    [
        ({"public_url": "https://queue.example.com"}, "with 'queue.example.com' in PETREL_GATEWAY_PUBLIC_URL"),
        ({"allowed_hosts": ["queue.example.com"]}, "with 'queue.example.com' in PETREL_GATEWAY_ALLOWED_HOSTS"),
        ({"host": "0.0.0.0"}, "on 0.0.0.0, which other hosts can reach"),
    ],
    ids=["public-url", "allowed-hosts", "host"],
)
def test_naming_a_host_others_reach_turns_keys_on(named: dict[str, Any], why: str) -> None:
    assert GatewaySettings(**named).auth_required()
    with pytest.raises(ValueError, match="PETREL_GATEWAY_INSECURE_NO_AUTH") as refused:
        GatewaySettings(auth="off", **named).auth_required()
    assert str(refused.value).startswith(f"PETREL_AUTH=off {why}")
    assert not GatewaySettings(auth="off", insecure_no_auth=True, **named).auth_required()


@pytest.mark.parametrize(
    "named",
    [{"public_url": "http://localhost:8080"}, {"allowed_hosts": ["localhost", "127.0.0.2", "[::1]"]}, {}],
)
def test_loopback_names_leave_keys_off(named: dict[str, Any]) -> None:
    assert not GatewaySettings(**named).auth_required()


@pytest.mark.parametrize("url", ["queue.example.com", "ftp://queue.example.com", "https://"])
def test_the_public_url_is_an_http_url_with_a_host(url: str) -> None:
    with pytest.raises(ValueError, match="public_url"):
        GatewaySettings(public_url=url)


async def test_behind_a_proxy_keys_are_required_and_other_names_refused(tmp_path: Path) -> None:
    admin = bearer(issue_key(tmp_path, "admin"))
    settings = GatewaySettings(data_dir=tmp_path, public_url="https://queue.example.com")
    async for gateway in in_process(create_app(settings)):
        proxied = {"host": "queue.example.com", "x-forwarded-for": "203.0.113.9", "x-forwarded-proto": "https"}
        assert (await gateway.get("/v1/keys", headers=proxied)).status_code == 401
        assert (await gateway.get("/v1/keys", headers=proxied | admin)).status_code == 200
        same_origin = proxied | admin | {"origin": "https://queue.example.com", "sec-fetch-site": "same-origin"}
        assert (await gateway.get("/v1/keys", headers=same_origin)).status_code == 200
        rebound = await gateway.get("/v1/keys", headers=admin | {"host": REBINDING})
        assert (rebound.status_code, problem_type(rebound)) == (400, "host-not-allowed")
        elsewhere = await gateway.get("/v1/keys", headers=admin | {"origin": "https://attacker.example"})
        assert (elsewhere.status_code, problem_type(elsewhere)) == (403, "cross-site-request")


async def test_with_keys_required_and_no_name_given_any_host_is_answered(tmp_path: Path) -> None:
    admin = bearer(issue_key(tmp_path, "admin"))
    async for gateway in in_process(create_app(GatewaySettings(data_dir=tmp_path, auth="required"))):
        assert (await gateway.get("/v1/keys", headers=admin | {"host": "queue.example.com"})).status_code == 200
