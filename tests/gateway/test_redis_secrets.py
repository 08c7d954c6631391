"""Idempotency keys in a Redis that asks for a password, and in one that speaks only TLS (rediss://)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.gateway_calls import send
from tests.support.redis_servers import PASSWORD, RedisServer, make_tls_files, started


@pytest.fixture(scope="module", params=["password", "tls"])
def secured_redis(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    folder = tmp_path_factory.mktemp(f"redis-{request.param}")
    tls = make_tls_files(folder / "certs") if request.param == "tls" else None
    with started(folder, tls) as server:
        yield server


@pytest.fixture
def gateway_overrides(request: pytest.FixtureRequest, secured_redis: RedisServer) -> dict[str, Any]:
    password = getattr(request, "param", PASSWORD)
    return {"redis_url": secured_redis.url_with_password(password)}


async def test_an_idempotent_send_is_replayed_through_the_secured_redis(gateway: httpx.AsyncClient) -> None:
    assert (await gateway.put("/v1/topics/orders", json={"queues": 2})).status_code in {200, 201}
    key = {"Idempotency-Key": f"test-{uuid.uuid4()}"}
    first = await send(gateway, "orders", {"body": "order 1 paid"}, **key)
    again = await send(gateway, "orders", {"body": "order 1 paid"}, **key)
    assert (first.status_code, again.status_code) == (201, 201), first.text
    assert again.json() == first.json()


@pytest.fixture
def gateway_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The gateway's errors, from its start (in the `gateway` fixture's setup) on."""
    caplog.set_level(logging.ERROR, logger="gateway.app")
    return caplog


def start_log(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(record.getMessage() for record in caplog.get_records("setup"))


@pytest.mark.parametrize("gateway_overrides", ["a-wrong-password"], indirect=True)
async def test_a_wrong_password_is_said_at_start_and_in_the_503_naming_redis_never_the_password(
    gateway_log: pytest.LogCaptureFixture, gateway: httpx.AsyncClient, secured_redis: RedisServer
) -> None:
    assert (await gateway.put("/v1/topics/orders", json={"queues": 2})).status_code in {200, 201}
    answer = await send(gateway, "orders", {"body": "order 1 paid"}, **{"Idempotency-Key": "k1"})
    assert answer.status_code == 503
    assert "the idempotency key store (Redis) refused the gateway's credentials" in answer.json()["detail"]
    said = start_log(gateway_log)
    shown = f"redis{'s' if secured_redis.url.startswith('rediss') else ''}://:***@127.0.0.1:{secured_redis.port}/0"
    assert f"Redis at {shown}" in said
    assert "refused the credentials" in said
    assert "a-wrong-password" not in said + gateway_log.text + answer.text
    assert PASSWORD not in said + answer.text
    assert (await send(gateway, "orders", {"body": "no key, no Redis"})).status_code == 201
