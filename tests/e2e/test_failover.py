"""Automatic failover: kill -9 of a SYNC_MASTER under a send load, its in-sync slave promoted by the controller.

Every send the old master answered is on the new master at the same queue and offset; sends
resume through the gateway; the old master, started again, learns it is a slave now, truncates
what it wrote that was never acknowledged, and catches up with its new master.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deploy.plan import ProcessSpec
from deploy.supervisor import Supervisor
from tests.support.crash_sends import CRASH_BROKER, kill_9_under_sends, read_topic
from tests.support.etcd import EtcdCluster, etcd_cluster
from tests.support.gateway_calls import received
from tests.support.processes import running, where_they_are
from tests.support.serving import free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e


@pytest.fixture
def stack() -> Iterator[contextlib.ExitStack]:
    """What a test starts beside its cluster (etcd), stopped after it."""
    with contextlib.ExitStack() as started:
        yield started


QUEUES = 4
SENDERS = 16


def specs(data_dir: Path, etcd: EtcdCluster) -> list[ProcessSpec]:
    nameserver_port, first_port, second_port, gateway_port = free_port(), free_port(), free_port(), free_port()
    shared = {
        "PETREL_DATA_DIR": str(data_dir),
        "PETREL_NAMESERVERS": f"127.0.0.1:{nameserver_port}",
        "PETREL_EVENTS_ENABLED": "false",
        "PETREL_ETCD_ENDPOINTS": ",".join(etcd.endpoints),
    }
    broker = (
        shared
        | {
            "PETREL_BROKER_BROKER_NAME": "broker-a",
            "PETREL_BROKER_ROLE": "SYNC_MASTER",
            "PETREL_BROKER_CONTROLLED": "true",
            "PETREL_BROKER_SYNC_REPLICATION_TIMEOUT_MS": "10000",
        }
        | CRASH_BROKER
    )
    return [
        ProcessSpec(
            "nameserver",
            "services.nameserver",
            nameserver_port,
            shared | {"PETREL_NAMESERVER_PORT": str(nameserver_port), "PETREL_NAMESERVER_CONTROLLER": "true"},
        ),
        ProcessSpec("broker-a", "services.broker", first_port, broker | {"PETREL_BROKER_PORT": str(first_port)}),
        ProcessSpec(
            "broker-a@1",
            "services.broker",
            second_port,
            broker | {"PETREL_BROKER_PORT": str(second_port), "PETREL_BROKER_BROKER_ID": "1"},
        ),
        ProcessSpec("gateway", "gateway", gateway_port, shared | {"PETREL_GATEWAY_PORT": str(gateway_port)}),
    ]


async def status(broker: httpx.AsyncClient, **params: int) -> dict[str, object]:
    answer = await broker.get("/internal/replication", params=params)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def first_answered_send(client: httpx.AsyncClient, supervisor: Supervisor, topic: str = "crash") -> float:
    """Send until the gateway answers 201; when it did (time.monotonic). Failing, what each process was doing."""

    async def answered() -> bool:
        try:
            sent = await client.post(f"/v1/topics/{topic}/messages", json={"body": "after the failover"})
        except httpx.HTTPError:
            return False
        return sent.status_code == 201

    await eventually(
        answered, "a send is answered by the new master", timeout=30, context=lambda: where_they_are(supervisor)
    )
    return time.monotonic()


async def test_a_killed_master_is_replaced_by_its_in_sync_slave_and_comes_back_as_its_slave(
    tmp_path: Path, stack: contextlib.ExitStack
) -> None:
    data_dir = tmp_path / "data"
    etcd = stack.enter_context(etcd_cluster(tmp_path / "etcd"))
    cluster = specs(data_dir, etcd)
    first, second = cluster[1], cluster[2]
    async with running(data_dir, cluster) as (supervisor, (_, old_master, new_master, client)):
        assert (await client.put("/v1/topics/crash", json={"queues": QUEUES})).status_code == 201
        joined = await status(old_master, in_sync=1, wait_ms=20_000)
        # in etcd's set too (`electable`): a kill before etcd has the join leaves nobody the controller may promote
        assert (joined["in_sync"], joined["electable"], joined["epoch"]) == ([1], [1], 1), joined

        acked = await kill_9_under_sends(client, supervisor, "broker-a", SENDERS)
        killed_at = time.monotonic()
        resumed_at = await first_answered_send(client, supervisor)
        promoted = await status(new_master)
        assert (promoted["role"], promoted["epoch"]) == ("SYNC_MASTER", 2), promoted
        view = (await client.get("/v1/cluster")).json()
        assert view["brokers"][0]["master"] == second.url.removeprefix("http://"), view

        on_new = await read_topic(new_master, QUEUES)
        lost = [mid for mid in acked if on_new.get(mid) != acked[mid]]
        assert not lost, f"{len(lost)} of {len(acked)} answered sends are not on the new master as answered"

        await asyncio.to_thread(supervisor.start, first)  # the old master returns
        back = await status(old_master)
        assert (back["role"], back["master"], back["epoch"]) == ("SLAVE", second.url[7:], 2), back
        rejoined = await status(new_master, in_sync=0, wait_ms=20_000)
        assert (rejoined["in_sync"], rejoined["electable"]) == ([0], [0]), rejoined
        sent = await client.post("/v1/topics/crash/messages", json={"body": "with the old master in sync"})
        assert sent.status_code == 201, sent.text

        async def same_log() -> bool:
            return (await status(old_master))["commitlog_end"] == (await status(new_master))["commitlog_end"]

        await eventually(same_log, "the old master has its new master's log")
        assert await read_topic(old_master, QUEUES) == await read_topic(new_master, QUEUES)
        print(f"failover: first send answered {resumed_at - killed_at:.2f} s after kill -9 of the master")


async def test_leases_in_flight_at_a_failover_are_delivered_again_by_the_new_master(
    tmp_path: Path, stack: contextlib.ExitStack
) -> None:
    data_dir = tmp_path / "data"
    etcd = stack.enter_context(etcd_cluster(tmp_path / "etcd"))
    async with running(data_dir, specs(data_dir, etcd)) as (supervisor, (_, old_master, new_master, client)):
        assert (await client.put("/v1/topics/orders", json={"queues": 2})).status_code == 201
        assert (await client.put("/v1/groups/billing", json={})).status_code == 201
        joined = await status(old_master, in_sync=1, wait_ms=20_000)
        assert (joined["in_sync"], joined["electable"]) == ([1], [1]), joined
        for n in range(20):
            sent = await client.post("/v1/topics/orders/messages", json={"body": f"order {n}"})
            assert sent.status_code == 201, sent.text
        done = await received(client, "billing", "orders", max_messages=10)
        acked = await client.post(
            "/v1/groups/billing/ack", json={"receipt_handles": [m["receipt_handle"] for m in done]}
        )
        assert all(r["ok"] for r in acked.json()["results"]), acked.text
        in_flight = await received(client, "billing", "orders", max_messages=5, invisible_seconds=600)
        assert len(done) == 10
        assert len(in_flight) == 5

        async def offsets_copied() -> bool:
            theirs = (await old_master.get("/internal/replication/consumers")).json()
            ours = (await new_master.get("/internal/replication/consumers")).json()
            return bool(theirs["offsets"]) and ours["offsets"] == theirs["offsets"]

        await eventually(offsets_copied, "the slave has its master's consumer offsets")
        _kill_9(supervisor, "broker-a")
        await first_answered_send(client, supervisor, "orders")

        late = await client.post(
            "/v1/groups/billing/ack", json={"receipt_handles": [m["receipt_handle"] for m in in_flight]}
        )
        assert late.status_code == 200, late.text
        assert not any(r["ok"] for r in late.json()["results"]), "the new master knows no lease of the old one"
        again = await received(client, "billing", "orders", max_messages=32)
        bodies = sorted(m["body"] for m in again)
        never = {f"order {n}" for n in range(20)} - {m["body"] for m in done} - {m["body"] for m in in_flight}
        assert set(bodies) == {m["body"] for m in in_flight} | never | {"after the failover"}
        assert len(bodies) == len(set(bodies)), "each delivered once"
        assert {m["body"] for m in done}.isdisjoint(bodies), "what was acked before the failover stays done"


def _kill_9(supervisor: Supervisor, name: str) -> None:
    process = next(c.process for c in supervisor.children if c.spec.name == name)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
