"""Kill -9 of a SYNC_MASTER under a send load: every send it answered is on its slave, same queue, same offset."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.plan import ProcessSpec
from tests.support.crash_sends import CRASH_BROKER, kill_9_under_sends, read_topic
from tests.support.processes import running
from tests.support.serving import free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e

QUEUES = 4
SENDERS = 16


def specs(data_dir: Path) -> list[ProcessSpec]:
    nameserver_port, master_port, slave_port, gateway_port = free_port(), free_port(), free_port(), free_port()
    shared = {
        "PETREL_DATA_DIR": str(data_dir),
        "PETREL_NAMESERVERS": f"127.0.0.1:{nameserver_port}",
        "PETREL_EVENTS_ENABLED": "false",
    }
    broker = (
        shared
        | {
            "PETREL_BROKER_BROKER_NAME": "broker-a",
        }
        | CRASH_BROKER
    )
    return [
        ProcessSpec(
            "nameserver", "services.nameserver", nameserver_port, shared | _port("NAMESERVER", nameserver_port)
        ),
        ProcessSpec("broker-a", "services.broker", master_port, broker | _port("BROKER", master_port) | _master()),
        ProcessSpec(
            "broker-a@1", "services.broker", slave_port, broker | _port("BROKER", slave_port) | _slave(master_port)
        ),
        ProcessSpec("gateway", "gateway", gateway_port, shared | _port("GATEWAY", gateway_port)),
    ]


def _port(service: str, port: int) -> dict[str, str]:
    return {f"PETREL_{service}_PORT": str(port)}


def _master() -> dict[str, str]:
    return {"PETREL_BROKER_ROLE": "SYNC_MASTER", "PETREL_BROKER_SYNC_REPLICATION_TIMEOUT_MS": "10000"}


def _slave(master_port: int) -> dict[str, str]:
    return {
        "PETREL_BROKER_ROLE": "SLAVE",
        "PETREL_BROKER_BROKER_ID": "1",
        "PETREL_BROKER_MASTER_ADDRESS": f"127.0.0.1:{master_port}",
    }


async def test_every_send_a_sync_master_answered_is_on_its_slave_after_kill_9(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with running(data_dir, specs(data_dir)) as (supervisor, (_, to_master, to_slave, client)):
        assert (await client.put("/v1/topics/crash", json={"queues": QUEUES})).status_code == 201
        joined = await to_master.get("/internal/replication", params={"in_sync": 1, "wait_ms": 20_000})
        assert joined.json()["in_sync"] == [1], joined.text

        acked = await kill_9_under_sends(client, supervisor, "broker-a", SENDERS)

        async def topic_copied() -> bool:
            return (await to_slave.get("/internal/topics/crash")).status_code == 200

        await eventually(topic_copied, "the slave has the master's topic")
        on_slave = await read_topic(to_slave, QUEUES)

    lost = [mid for mid in acked if mid not in on_slave]
    assert not lost, f"{len(lost)} of {len(acked)} answered sends are not on the slave after kill -9 of the master"
    for message_id, stored in acked.items():
        assert on_slave[message_id] == stored
