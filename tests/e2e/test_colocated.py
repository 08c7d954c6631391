"""Colocated mode on real processes: `petrel up --colocated` runs the gateway and its broker in one process, which
`petrel status` shows with both roles and both ports; what needs separate processes is refused, naming the option;
a chaos round kills the one process mid-load and loses nothing answered.

(The core tests, send, receive, ack, retries, scheduled delivery, transactions and a broker's kill -9, run colocated
too: tests/e2e/conftest.py's `core_cluster`, test_scheduled_delivery.py's `cluster`.)
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest

from bench.chaos.ledger import BROKER, TIMER, TXCHECK
from bench.chaos.run import CLUSTER_ENV, ChaosConfig, checkback_receiver, run_chaos, seed_from_env, store_check
from libs import webhooks
from tests.support.cluster import LocalCluster, started
from tests.support.petrel_up import petrel, petrel_env, petrel_up

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("option", "promise"),
    [
        (["--brokers", "2"], "runs one broker: --brokers 2"),
        (["--replicas", "1"], "runs one broker without slaves: --replicas 1"),
        (["--gateway-workers", "2"], "runs one gateway process: --gateway-workers 2"),
    ],
    ids=["brokers", "replicas", "gateway-workers"],
)
def test_colocated_up_refuses_what_needs_separate_processes_naming_the_option(
    tmp_path: Path, option: list[str], promise: str
) -> None:
    result = petrel("up", "--colocated", *option, "--data-dir", str(tmp_path / "data"))

    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        f"could not start the cluster: --colocated {promise} needs separate processes (leave out --colocated)"
        in result.stderr
    ), result.stderr
    assert not (tmp_path / "data" / "run").exists(), "a process was started before the refusal"


def test_serve_colocated_refuses_a_gateway_sharing_its_port_and_a_service_other_than_the_gateway() -> None:
    shared = petrel("serve", "gateway", "--colocated", env=petrel_env(PETREL_GATEWAY_REUSE_PORT="true"))
    broker = petrel("serve", "broker", "--colocated", env=petrel_env())

    assert shared.returncode == 2, shared.stderr
    assert shared.stderr.startswith("petrel serve gateway: colocated mode runs one gateway process: ")
    assert "PETREL_GATEWAY_REUSE_PORT" in shared.stderr
    assert broker.returncode == 2, broker.stderr
    assert broker.stderr == (
        "petrel serve broker: --colocated runs the gateway with its broker: petrel serve gateway --colocated\n"
    )


@pytest.mark.timeout(180)
def test_colocated_up_serves_sends_and_receives_from_one_process_that_status_shows_with_both_roles(
    tmp_path: Path,
) -> None:
    with petrel_up(tmp_path, "--colocated", "--no-etl") as cluster:
        names = [p["name"] for p in cluster.state()["processes"]]  # type: ignore[attr-defined]
        assert "gateway+broker-a" in names, names
        assert not {"gateway", "broker-a"} & set(names), names
        with httpx.Client(base_url=cluster.gateway, timeout=15) as client:
            sent = client.post("/v1/topics/orders/messages", json={"body": "one process"})
            assert sent.status_code == 201, sent.text
            assert client.put("/v1/groups/billing", json={}).status_code == 201
            received = client.post("/v1/groups/billing/topics/orders/receive", json={"wait_seconds": 5})
            (message,) = received.json()["messages"]
            acked = client.post("/v1/groups/billing/ack", json={"receipt_handles": [message["receipt_handle"]]})
        broker = httpx.get(f"{cluster.url('broker')}/healthz", timeout=5).json()
        status = petrel("status", "--data-dir", str(cluster.data_dir), "--json")
        stopped = cluster.process
        stopped.send_signal(signal.SIGTERM)
        assert stopped.wait(30) == 0

    assert message["body"] == "one process"
    assert acked.json()["results"][0]["ok"], acked.text
    assert broker["service"] == "broker", "the broker does not listen on its own port"
    assert status.returncode == 0, status.stderr
    (row,) = [p for p in json.loads(status.stdout)["processes"] if p["name"] == "gateway+broker-a"]
    assert (row["health"], row["port"], row["other_ports"]) == (
        "ok",
        cluster.ports["gateway"],
        [cluster.ports["broker"]],
    )
    assert not (cluster.data_dir / "brokers" / "broker-a" / "abort").exists(), "the broker did not stop cleanly"


@pytest.mark.timeout(240)
async def test_every_answered_send_is_accounted_for_under_kill_9_of_the_colocated_process(tmp_path: Path) -> None:
    # Each of the three dies once in 10 s of load: "the broker" is the one process that is the gateway and broker-a.
    config = ChaosConfig(
        seed=seed_from_env(), duration_s=10.0, kills=3, quiesce_s=40.0, targets=(BROKER, TIMER, TXCHECK)
    )
    secret = webhooks.new_secret()
    data_dir = tmp_path / "data"
    print(f"chaos seed {config.seed}")
    with checkback_receiver(secret) as checkback_url:
        async with started(LocalCluster(data_dir, CLUSTER_ENV, txcheck=True, colocated=True)) as (cluster, client):
            result = await run_chaos(cluster, client, config, checkback_url, secret)
    result.store_check = store_check(data_dir / "brokers" / "broker-a")
    print(result.report())

    assert result.ok, result.report()
    assert result.verdict.figures["sends answered"] > 0
    assert [kill.process for kill in result.ledger.kills].count(BROKER) == 1
