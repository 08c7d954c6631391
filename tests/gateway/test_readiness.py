"""The gateway's /readyz: one nameserver call a second however many ask, and what is wrong told only to an admin.

/readyz is open (probes carry no key), so a flood of it must not become a flood of
nameserver calls, and its answer must not hand a stranger the nameserver's addresses
and errors: without a key (when keys are required) it says ready or not ready, nothing else.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.app import create_app
from gateway.settings import GatewaySettings
from libs.http.asgi import AsgiTransport
from tests.support.api_keys import bearer, issue_key
from tests.support.apps import in_process
from tests.support.clock import FakeClock

NAMESERVER = "127.0.0.1:19876"
TROUBLE = "etcd at 10.20.0.7:2379 refused user petrel-controller"
"""What the nameserver answers: the kind of detail a stranger should not read."""
PROBES = 50


@dataclass
class Nameserver:
    """Counts calls to its cluster listing, answers each once `release` is set: a 500 saying TROUBLE (not a 503,
    which the gateway's client asks again at once: one check would be three calls)."""

    calls: int = 0
    called: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> Starlette:
        async def clusters(request: Request) -> JSONResponse:
            self.calls += 1
            self.called.set()
            await self.release.wait()
            problem = {"type": "https://petrel.dev/problems/internal-error", "status": 500, "detail": TROUBLE}
            return JSONResponse(problem, status_code=500, media_type="application/problem+json")

        return Starlette(routes=[Route("/internal/clusters", clusters)])


@pytest.fixture
def nameserver() -> Nameserver:
    return Nameserver()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def admin_key(tmp_path: Path) -> str:
    return issue_key(tmp_path, "admin", name="ops")


async def gateway_of(
    settings: GatewaySettings, nameserver: Nameserver, clock: FakeClock
) -> AsyncIterator[httpx.AsyncClient]:
    transport = AsgiTransport({NAMESERVER: nameserver.app()})
    async for client in in_process(create_app(settings, transport=transport, clock=clock)):
        yield client


@pytest.fixture
async def keyed_gateway(tmp_path: Path, nameserver: Nameserver, clock: FakeClock) -> AsyncIterator[httpx.AsyncClient]:
    settings = GatewaySettings(data_dir=tmp_path, auth="required", nameservers=[NAMESERVER])
    async for client in gateway_of(settings, nameserver, clock):
        yield client


async def test_concurrent_probes_share_one_nameserver_call_a_second(
    keyed_gateway: httpx.AsyncClient, nameserver: Nameserver, clock: FakeClock
) -> None:
    probes = [asyncio.create_task(keyed_gateway.get("/readyz")) for _ in range(PROBES)]
    await nameserver.called.wait()
    nameserver.release.set()
    answers = await asyncio.gather(*probes)

    assert nameserver.calls == 1
    assert {(a.status_code, a.text) for a in answers} == {(503, '{"status":"not ready"}')}
    clock.advance(0.5)
    assert (await keyed_gateway.get("/readyz")).status_code == 503
    assert nameserver.calls == 1, "within a second, the last check answers"
    clock.advance(0.6)
    assert (await keyed_gateway.get("/readyz")).status_code == 503
    assert nameserver.calls == 2


async def test_what_is_wrong_is_told_only_to_an_admin_key(
    keyed_gateway: httpx.AsyncClient, nameserver: Nameserver, tmp_path: Path, admin_key: str
) -> None:
    nameserver.release.set()
    publisher = issue_key(tmp_path, "pub", "sub", name="app")
    for headers in ({}, bearer("ptk_0123456789ab_" + "A" * 43), bearer(publisher)):
        answer = await keyed_gateway.get("/readyz", headers=headers)
        assert (answer.status_code, answer.json()) == (503, {"status": "not ready"}), headers
        assert "10.20.0.7" not in answer.text
    told = await keyed_gateway.get("/readyz", headers=bearer(admin_key))
    assert told.status_code == 503
    body = told.json()
    assert (body["status"], body["ready"], body["service"]) == ("not ready", False, "gateway")
    assert TROUBLE in body["checks"]["nameservers"]


async def test_on_loopback_without_keys_what_is_wrong_is_told(
    tmp_path: Path, nameserver: Nameserver, clock: FakeClock
) -> None:
    nameserver.release.set()
    async for gateway in gateway_of(GatewaySettings(data_dir=tmp_path, nameservers=[NAMESERVER]), nameserver, clock):
        answer = await gateway.get("/readyz")
        assert answer.status_code == 503
        assert TROUBLE in answer.json()["checks"]["nameservers"]
