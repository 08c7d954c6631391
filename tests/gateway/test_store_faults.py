"""A broker whose disk fails a sync: the gateway's sends answer a clear 503, its reads go on."""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from gateway.app import create_app
from gateway.settings import GatewaySettings
from libs.store.config import FlushMode
from services.broker.app import create_app as broker_app
from tests.support.apps import broker_settings, in_process
from tests.support.gateway_calls import problem_type, pull, send
from tests.support.serving import ServedApp, start_app


@pytest.fixture
def sync_broker(nameserver: ServedApp) -> Iterator[ServedApp]:
    # No periodic flush: the only syncs are the group commits of the sends below.
    settings = broker_settings(nameserver, flush_mode=FlushMode.SYNC_FLUSH, flush_interval_ms=600_000)
    served = start_app(broker_app(settings), settings.port)
    yield served
    if served.thread.is_alive():
        served.stop()


@pytest.fixture
async def one_broker_gateway(nameserver: ServedApp, sync_broker: ServedApp) -> AsyncIterator[httpx.AsyncClient]:
    async for client in in_process(create_app(GatewaySettings(nameservers=[nameserver.address]))):
        yield client


def disk_fails_next_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inject a disk fault: the next fdatasync fails with EIO, later ones succeed (as the kernel reports once)."""
    real = os.fdatasync
    failures = [OSError(errno.EIO, "Input/output error")]

    def fdatasync(fd: int) -> None:
        if failures:
            raise failures.pop()
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)


async def test_after_a_failed_sync_sends_answer_store_read_only_and_reads_go_on(
    one_broker_gateway: httpx.AsyncClient, sync_broker: ServedApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = one_broker_gateway
    first = await send(gateway, "orders", {"body": "durable", "message_group": "g"})
    assert first.status_code == 201, first.text
    where = first.json()

    disk_fails_next_sync(monkeypatch)
    in_doubt = await send(gateway, "orders", {"body": "in doubt", "message_group": "g"})
    assert in_doubt.status_code == 503, in_doubt.text

    for body in ("refused", "refused again"):
        refused = await send(gateway, "orders", {"body": body, "message_group": "g"})
        assert refused.status_code == 503, refused.text
        assert problem_type(refused) == "store-read-only"
        assert "until the broker is restarted" in refused.json()["detail"]

    async with httpx.AsyncClient() as client:
        metrics = (await client.get(f"{sync_broker.url}/metrics")).text
    assert "petrel_store_read_only 1.0" in metrics

    page = await pull(gateway, "orders", where["queue_id"], where["broker"])
    bodies = [m["body"] for m in page["messages"]]
    assert bodies[0] == "durable"
    assert not {"refused", "refused again"} & set(bodies)
