"""Kill -9 of a SYNC_FLUSH broker in the middle of sends: nothing answered is lost."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from deploy.plan import ProcessSpec
from deploy.supervisor import Supervisor
from tests.support.crash_sends import kill_9_under_sends
from tests.support.serving import free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e

QUEUES = 4
SENDERS = 16


def specs(data_dir: Path) -> tuple[ProcessSpec, ProcessSpec, ProcessSpec]:
    nameserver_port, broker_port, gateway_port = free_port(), free_port(), free_port()
    shared = {
        "PETREL_DATA_DIR": str(data_dir),
        "PETREL_NAMESERVERS": f"127.0.0.1:{nameserver_port}",
        "PETREL_EVENTS_ENABLED": "false",
    }
    broker_env = shared | {
        "PETREL_BROKER_PORT": str(broker_port),
        "PETREL_BROKER_FLUSH_MODE": "SYNC_FLUSH",
        "PETREL_BROKER_CHECKPOINT_INTERVAL_MS": "100",  # checkpoints fall between a queue's messages
        "PETREL_BROKER_SEGMENT_SIZE": str(8 * 1024 * 1024),
        "PETREL_BROKER_INDEX_SLOT_COUNT": "65536",
        "PETREL_BROKER_INDEX_MAX_ENTRIES": "400000",
        "PETREL_BROKER_CQ_UNITS_PER_FILE": "500",
        "PETREL_BROKER_REGISTER_INTERVAL_SECONDS": "0.5",
    }
    return (
        ProcessSpec(
            "nameserver",
            "services.nameserver",
            nameserver_port,
            shared | {"PETREL_NAMESERVER_PORT": str(nameserver_port)},
        ),
        ProcessSpec("broker-a", "services.broker", broker_port, broker_env),
        ProcessSpec("gateway", "gateway", gateway_port, shared | {"PETREL_GATEWAY_PORT": str(gateway_port)}),
    )


async def read_everything(client: httpx.AsyncClient) -> dict[int, list[dict[str, object]]]:
    queues: dict[int, list[dict[str, object]]] = {}
    for queue in range(QUEUES):
        offset, messages = 0, []
        while True:
            page = (
                await client.get(f"/v1/topics/crash/queues/{queue}/messages", params={"offset": offset, "max": 256})
            ).json()
            messages.extend(page["messages"])
            if page["next_offset"] >= page["max_offset"]:
                break
            offset = page["next_offset"]
        queues[queue] = messages
    return queues


async def test_every_answered_send_survives_kill_9(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    nameserver, broker, gateway = specs(data_dir)
    supervisor = Supervisor(data_dir)
    try:
        for spec in (nameserver, broker, gateway):
            await asyncio.to_thread(supervisor.start, spec)
        async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
            assert (await client.put("/v1/topics/crash", json={"queues": QUEUES})).status_code == 201
            acked = await kill_9_under_sends(client, supervisor, "broker-a", SENDERS)

            supervisor.children = [c for c in supervisor.children if c.spec.name != "broker-a"]
            await asyncio.to_thread(supervisor.start, broker)

            async def routed() -> bool:
                return (await client.get("/v1/topics/crash")).status_code == 200

            await eventually(routed, "the restarted broker is routed again")
            stored = await read_everything(client)

        for queue, messages in stored.items():
            assert [m["queue_offset"] for m in messages] == list(range(len(messages))), f"queue {queue} has gaps"
        by_id = {m["message_id"]: m for messages in stored.values() for m in messages}
        lost = [mid for mid in acked if mid not in by_id]
        assert not lost, f"{len(lost)} of {len(acked)} answered sends are gone after kill -9"
        for message_id, (queue, offset, body) in acked.items():
            found = by_id[message_id]
            assert (found["queue_id"], found["queue_offset"], found["body"]) == (queue, offset, body)
        log = (data_dir / "logs" / "broker-a.log").read_text()
        assert "recovered after an unclean stop" in log, "the broker did not go through crash recovery"
    finally:
        supervisor.stop_all()
    check = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "deploy", "store", "check", str(data_dir / "brokers" / "broker-a")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "WARNING" not in check.stdout, check.stdout
