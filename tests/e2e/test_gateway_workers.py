"""`petrel up --gateway-workers 2`: two gateway processes on one port (SO_REUSEPORT), driven as curl would.

Every call below opens a fresh connection (httpx's module functions), so each is a new
choice for the kernel among the processes listening on the port.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.exported_events import exported_events
from tests.support.petrel_up import UpCluster, petrel_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

FRESH_CONNECTIONS = 32
"""Calls made to see both workers answer: the odds that one is missed are 2^-31."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[UpCluster]:
    env = {
        "PETREL_BROKER_REGISTER_INTERVAL_SECONDS": "0.5",
        "PETREL_BROKER_SEGMENT_SIZE": str(16 * 1024 * 1024),
        "PETREL_BROKER_INDEX_SLOT_COUNT": "65536",
        "PETREL_BROKER_INDEX_MAX_ENTRIES": "100000",
    }
    with petrel_up(tmp_path, "--gateway-workers", "2", "--no-etl", env=env) as running:
        yield running


def worker_answering(cluster: UpCluster) -> str:
    answer = httpx.get(f"{cluster.gateway}/healthz", timeout=10)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["worker"])


def send(cluster: UpCluster, body: str) -> str:
    answer = httpx.post(f"{cluster.gateway}/v1/topics/orders/messages", json={"body": body}, timeout=10)
    assert answer.status_code == 201, f"a send failed: {answer.status_code} {answer.text}"
    return str(answer.json()["message_id"])


def sent_by(cluster: UpCluster, message_ids: set[str]) -> dict[str, int]:
    """message id -> the pid of the gateway whose `sent` event names it, as the exported files hold them."""
    events = exported_events(cluster.data_dir)
    return {e["message_id"]: e["pid"] for e in events if e["event"] == "sent" and e["message_id"] in message_ids}


def receive_all(cluster: UpCluster, count: int) -> list[dict[str, Any]]:
    """Receive and ack until `count` distinct messages came, each call on a fresh connection."""
    received: dict[str, dict[str, Any]] = {}

    def all_received() -> bool:
        url = f"{cluster.gateway}/v1/groups/billing/topics/orders/receive"
        answer = httpx.post(url, json={"max_messages": 32, "wait_seconds": 1}, timeout=10)
        assert answer.status_code == 200, answer.text
        messages = answer.json()["messages"]
        if messages:
            handles = [m["receipt_handle"] for m in messages]
            acked = httpx.post(f"{cluster.gateway}/v1/groups/billing/ack", json={"receipt_handles": handles})
            assert acked.status_code == 200, acked.text
        received.update((m["message_id"], m) for m in messages)
        return len(received) >= count

    wait_until(all_received, f"{count} messages received through the workers", 30)
    return list(received.values())


@pytest.mark.timeout(180)  # 74 s with the CPU at a quarter (a cgroup quota of half a core of two): twice that
def test_two_workers_share_the_port_and_one_killed_leaves_the_other_serving(cluster: UpCluster) -> None:
    pids = {name: cluster.pid_of(name) for name in ("gateway", "gateway-2")}
    assert len(set(pids.values())) == 2, cluster.state()
    assert "gateway:   2 workers sharing port" in cluster.output.read_text()

    answered = {worker_answering(cluster) for _ in range(FRESH_CONNECTIONS)}
    assert answered == {"gateway", "gateway-2"}, "the kernel did not spread connections over both workers"

    assert httpx.put(f"{cluster.gateway}/v1/topics/orders").status_code == 201
    assert httpx.put(f"{cluster.gateway}/v1/groups/billing", json={}).status_code == 201
    message_ids = {send(cluster, f"order {i}") for i in range(FRESH_CONNECTIONS)}
    wait_until(lambda: sent_by(cluster, message_ids).keys() == message_ids, "every send's event exported", 10)
    assert set(sent_by(cluster, message_ids).values()) == set(pids.values()), "both workers' events, each its own"
    files = {p.name for p in (cluster.data_dir / "export" / "events").rglob("gateway-*.jsonl")}
    assert files == {f"gateway-{pid}.jsonl" for pid in pids.values()}, "the workers do not write files apart"
    assert {m["message_id"] for m in receive_all(cluster, len(message_ids))} == message_ids

    os.kill(pids["gateway-2"], signal.SIGKILL)
    reported = f"gateway-2 (pid {pids['gateway-2']}) exited with code -9"
    wait_until(lambda: reported in cluster.output.read_text(), "the killed worker reported by petrel up", 10)
    assert (cluster.running("gateway"), cluster.running("gateway-2")) == (True, False), cluster.state()

    after = {send(cluster, f"after {i}") for i in range(FRESH_CONNECTIONS)}
    assert {worker_answering(cluster) for _ in range(FRESH_CONNECTIONS)} == {"gateway"}
    assert {m["message_id"] for m in receive_all(cluster, len(after))} == after

    cluster.process.send_signal(signal.SIGTERM)
    assert cluster.process.wait(30) == 0, cluster.output.read_text()
