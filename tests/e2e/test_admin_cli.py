"""The operator's `petrel` commands against a live `petrel up` cluster, run as a user types them."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.app import create_app as gateway_app
from gateway.settings import GatewaySettings
from libs.http.app import installed_version
from tests.support.api_keys import issue_key
from tests.support.petrel_up import PORT_FLAGS, UpCluster, petrel, petrel_env, petrel_up
from tests.support.serving import free_port, serving
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpCluster]:
    with petrel_up(tmp_path_factory.mktemp("admin"), "--no-etl") as running:
        yield running


def admin(cluster: UpCluster, *argv: str) -> tuple[int, str, str]:
    done = petrel(*argv, env=petrel_env(PETREL_GATEWAY=cluster.gateway))
    return done.returncode, done.stdout, done.stderr


def send(cluster: UpCluster, topic: str, body: str, key: str | None = None) -> str:
    fields = {"body": body} | ({"keys": [key]} if key else {})
    answer = httpx.post(f"{cluster.gateway}/v1/topics/{topic}/messages", json=fields, timeout=10)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["message_id"])


@pytest.mark.timeout(180)
def test_how_far_behind_is_billing_and_why_is_a_message_not_acked(cluster: UpCluster) -> None:
    gateway = cluster.gateway
    httpx.put(f"{gateway}/v1/topics/invoices", json={"queues": 2}, timeout=10).raise_for_status()
    httpx.put(f"{gateway}/v1/groups/billing", json={}, timeout=10).raise_for_status()
    receive = f"{gateway}/v1/groups/billing/topics/invoices/receive"
    assert httpx.post(receive, json={"wait_seconds": 0}, timeout=10).json()["messages"] == []
    ids = [send(cluster, "invoices", f"invoice {n}", key=f"customer-{n}") for n in range(3)]
    (leased,) = httpx.post(receive, json={"max_messages": 1}, timeout=10).json()["messages"]

    code, out, _ = admin(cluster, "lag", "billing")
    assert code == 0
    assert out.splitlines()[0] == "group billing: 3 behind, 1 in flight"
    code, out, _ = admin(cluster, "lag", "billing", "--json")
    assert (code, json.loads(out)["total_lag"]) == (0, 3)

    code, out, _ = admin(cluster, "trace", leased["message_id"])
    assert code == 0
    (row,) = [line for line in out.splitlines() if line.startswith("billing")]
    assert row.split()[:3] == ["billing", "in_flight", "1"]

    code, out, _ = admin(cluster, "topics")
    assert code == 0
    assert any(line.split()[:1] == ["invoices"] for line in out.splitlines())
    code, out, _ = admin(cluster, "groups", "--json")
    assert "billing" in [g["name"] for g in json.loads(out)["groups"]]

    code, out, _ = admin(cluster, "peek", "invoices", "--json")
    assert sorted(m["message_id"] for m in json.loads(out)["messages"]) == sorted(ids)
    code, out, _ = admin(cluster, "peek", "invoices", "--key", "customer-1", "--json")
    assert [m["message_id"] for m in json.loads(out)["messages"]] == [ids[1]]

    code, out, _ = admin(cluster, "dlq", "billing")
    assert (code, out.strip()) == (0, "(none)")


@pytest.mark.timeout(120)
def test_peek_since_reads_the_first_messages_stored_since_then_oldest_first(cluster: UpCluster) -> None:
    httpx.put(f"{cluster.gateway}/v1/topics/ledger", json={"queues": 3}, timeout=10).raise_for_status()
    ids = [send(cluster, "ledger", body) for body in ("before", "marker", *(f"entry {n}" for n in range(5)))]
    stored = {i: httpx.get(f"{cluster.gateway}/v1/messages/{i}", timeout=10).json()["stored_at"] for i in ids}
    since = stored[ids[1]]

    code, out, err = admin(cluster, "peek", "ledger", "--since", str(since), "--max", "4", "--json")
    assert code == 0, err
    found = [(m["stored_at"], m["message_id"]) for m in json.loads(out)["messages"]]
    assert len(found) == 4
    assert found == sorted(found, key=lambda f: f[0]), "not oldest first"
    assert all(at >= since for at, _ in found), "a message stored before --since"
    earlier = {i for i, at in stored.items() if since <= at < found[-1][0]}
    assert earlier <= {i for _, i in found}, "a message stored since then, before the last one shown, is missing"
    assert {ids[1], ids[2]} <= {i for _, i in found}
    code, out, _ = admin(cluster, "peek", "ledger", "--since", str(since + 3_600_000))
    assert (code, out.strip()) == (0, "(none)")


@pytest.mark.timeout(120)
def test_tail_prints_what_arrives_and_errors_say_what_to_do(cluster: UpCluster) -> None:
    httpx.put(f"{cluster.gateway}/v1/topics/audit-log", json={"queues": 2}, timeout=10).raise_for_status()
    send(cluster, "audit-log", "before the tail")
    code, out, _ = admin(cluster, "tail", "audit-log", "--once", "--wait", "0.2", "--json")
    assert (code, json.loads(out)["messages"]) == (0, []), "tail starts at the end"

    code, _, err = admin(cluster, "lag", "nobody")
    assert code == 1
    assert "404" in err
    assert "nobody" in err
    refused = petrel("topics", env=petrel_env(PETREL_GATEWAY=f"http://127.0.0.1:{free_port()}"))
    assert refused.returncode == 1
    assert "PETREL_GATEWAY" in refused.stderr


@pytest.mark.timeout(60)
def test_under_auth_a_missing_key_names_petrel_api_key_and_a_refusal_says_why(tmp_path: Path) -> None:
    """A gateway with API keys required, served alone: a 401 or 403 is answered before any broker is asked, so it
    is the cheapest real gateway to run the commands against (an auth-on `petrel up` costs half a minute)."""
    publisher = issue_key(tmp_path, "pub:invoices", name="publisher")
    nowhere = f"127.0.0.1:{free_port()}"
    settings = GatewaySettings(auth="required", data_dir=tmp_path, nameservers=[nowhere])
    with serving(gateway_app(settings)) as gateway:
        for argv in (["topics"], ["lag", "billing"], ["peek", "orders"]):
            done = petrel(*argv, env=petrel_env(PETREL_GATEWAY=gateway.url))
            assert done.returncode == 1, done.stdout
            assert "Traceback" not in done.stderr, done.stderr
            assert "401" in done.stderr
            assert "set PETREL_API_KEY" in done.stderr

        for argv, refused in ((["lag", "billing"], "group 'billing'"), (["peek", "orders"], "topic 'orders'")):
            done = petrel(*argv, env=petrel_env(PETREL_GATEWAY=gateway.url, PETREL_API_KEY=publisher))
            assert done.returncode == 1, done.stdout
            assert "Traceback" not in done.stderr, done.stderr
            (line,) = done.stderr.splitlines()
            assert line.startswith(f"petrel {argv[0]}: 403 Forbidden: key "), line
            assert refused in line, "the 403's detail (what the key may not do) is not printed"
            assert "PETREL_API_KEY" in line


@pytest.mark.timeout(180)
def test_up_wait_returns_once_up_and_status_lists_every_process(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    argv = ["up", "--wait", "--no-etl", "--data-dir", str(data_dir)]
    for flag in PORT_FLAGS:
        argv += [flag, str(free_port())]
    done = petrel(*argv, timeout=150)
    state_file = data_dir / "run" / "cluster.json"
    try:
        assert done.returncode == 0, done.stderr + done.stdout
        assert "Petrel is up." in done.stdout
        status = petrel("status", "--data-dir", str(data_dir), "--json")
        assert status.returncode == 0, status.stderr
        processes = json.loads(status.stdout)["processes"]
        by_name = {p["name"]: p for p in processes}
        assert {"nameserver", "broker-a", "gateway"} <= set(by_name)
        assert all(p["health"] == "ok" for p in processes if p["port"]), processes
        assert all(0 < p["pss_mb"] <= p["rss_mb"] for p in processes), processes
        assert by_name["petrel up"]["pid"] == json.loads(state_file.read_text())["supervisor_pid"]
        assert by_name["petrel up"]["children"] == 0, "each process it started is a row of its own, counted once"
        assert by_name["txcheck-worker"]["children"] >= 1, "the Celery pool's processes count with their worker"
        assert all(p["version"] == installed_version() for p in processes if p["port"]), processes
        assert all(p["version"] == "-" for p in processes if not p["port"]), processes
        table = petrel("status", "--data-dir", str(data_dir))
        assert table.stdout.splitlines()[0].split()[:4] == ["PROCESS", "PID", "PORT", "HEALTH"]
    finally:
        if state_file.exists():
            supervisor = json.loads(state_file.read_text())["supervisor_pid"]
            os.kill(supervisor, signal.SIGTERM)
            wait_until(lambda: not state_file.exists(), "the waited-for cluster stopped", 30)
