"""API keys on real processes: `petrel up` with PETREL_AUTH=required, keys made and revoked with `petrel keys`.

One cluster for the module (each test makes its own keys, topics and groups); the
operator's commands run as subprocesses and the test reads what they print, as a
terminal would show it. The last tests start no cluster: auth off on an address other
hosts reach is refused before anything starts, and runs only when told
`--insecure-no-auth`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.plan import UpOptions, plan_cluster
from deploy.supervisor import Supervisor
from libs.cluster_token import ensure_token_file
from tests.support.api_keys import bearer
from tests.support.exported_events import exported_events
from tests.support.petrel_up import UpCluster, petrel, petrel_env, petrel_up
from tests.support.serving import free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e

UNAUTHORIZED = "https://petrel.dev/problems/unauthorized"
FORBIDDEN = "https://petrel.dev/problems/forbidden"
REVOCATION_SECONDS = 8.0
"""Within "seconds": the gateway rereads keys every 2 s (key_refresh_seconds); the rest is a busy machine's slack."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpCluster]:
    with petrel_up(tmp_path_factory.mktemp("auth"), "--no-etl", env=petrel_env(PETREL_AUTH="required")) as up:
        yield up


@pytest.fixture
async def gateway(cluster: UpCluster) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=cluster.gateway, timeout=15) as client:
        yield client


def keys(cluster: UpCluster, *argv: str) -> subprocess.CompletedProcess[str]:
    """`petrel keys --data-dir <the cluster's> <argv>`, which must succeed."""
    done = petrel("keys", "--data-dir", str(cluster.data_dir), *argv)
    assert done.returncode == 0, f"petrel keys {' '.join(argv)}: {done.returncode}\n{done.stdout}{done.stderr}"
    return done


def create_key(cluster: UpCluster, name: str, *allow: str) -> dict[str, Any]:
    """`petrel keys create --json`: the key's details and, once, its text under `key`."""
    grants = [arg for grant in allow for arg in ("--allow", grant)]
    created: dict[str, Any] = json.loads(keys(cluster, "create", "--name", name, *grants, "--json").stdout)
    return created


def audits(cluster: UpCluster) -> list[dict[str, Any]]:
    return [e for e in exported_events(cluster.data_dir) if e["event"] == "audit"]


def test_petrel_up_prints_how_to_make_the_first_key_and_the_printed_commands_work(cluster: UpCluster) -> None:
    printed = cluster.output.read_text()
    auth = printed.split("  auth:", 1)[1].split("  API docs:", 1)[0]
    assert "API keys required (Authorization: Bearer <key>)" in auth, printed
    (make_key,) = [line.strip() for line in auth.splitlines() if "petrel keys" in line]
    (try_it,) = [line.split("try:", 1)[1].strip() for line in printed.splitlines() if "try:" in line]
    assert make_key == (
        f"KEY=$(petrel keys --data-dir {cluster.data_dir} create --name admin --allow admin --allow pub --allow sub)"
    )
    assert try_it == f'curl -H "Authorization: Bearer $KEY" -X PUT {cluster.gateway}/v1/topics/orders'

    shell = petrel_env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    script = f"set -e\n{make_key}\n{try_it} -sS -o /dev/null -w '%{{http_code}}'\n"
    done = subprocess.run(["bash", "-c", script], env=shell, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "201"), f"the printed commands:\n{script}{done.stdout}{done.stderr}"


async def test_keys_publish_and_subscribe_within_their_grants_and_nothing_else(
    cluster: UpCluster, gateway: httpx.AsyncClient
) -> None:
    admin = keys(cluster, "create", "--name", "ops", "--allow", "admin").stdout.strip()
    assert admin.startswith("ptk_"), admin  # stdout is the key alone: KEY=$(petrel keys create ...) works
    producer = create_key(cluster, "orders-producer", "pub:orders*")
    consumer = create_key(cluster, "orders-consumer", "sub:orders*")
    assert (producer["allow"], producer["revoked_at"]) == (["pub:orders*"], None)

    assert (await gateway.put("/v1/topics/orders-paid", headers=bearer(admin))).status_code == 201
    group = await gateway.put("/v1/groups/orders-billing", json={}, headers=bearer(admin))
    assert group.status_code == 201, group.text

    sent = await gateway.post("/v1/topics/orders-paid/messages", json={"body": "paid"}, headers=bearer(producer["key"]))
    assert sent.status_code == 201, sent.text
    anonymous = await gateway.post("/v1/topics/orders-paid/messages", json={"body": "who?"})
    assert anonymous.status_code == 401, anonymous.text
    assert anonymous.json()["type"] == UNAUTHORIZED
    assert anonymous.headers["www-authenticate"] == 'Bearer realm="petrel"'

    receive = "/v1/groups/orders-billing/topics/orders-paid/receive"
    wanted = {"max_messages": 10, "wait_seconds": 5}
    refused = await gateway.post(receive, json=wanted, headers=bearer(producer["key"]))
    assert refused.status_code == 403, refused.text
    assert refused.json()["type"] == FORBIDDEN
    assert "sub:group/orders-billing" in refused.json()["required"], refused.json()

    received = await gateway.post(receive, json=wanted, headers=bearer(consumer["key"]))
    assert received.status_code == 200, received.text
    (message,) = received.json()["messages"]
    assert (message["message_id"], message["body"]) == (sent.json()["message_id"], "paid")
    handles = {"receipt_handles": [message["receipt_handle"]]}
    acked = await gateway.post("/v1/groups/orders-billing/ack", json=handles, headers=bearer(consumer["key"]))
    assert [r["ok"] for r in acked.json()["results"]] == [True], acked.text

    def written() -> dict[str, list[dict[str, Any]]]:
        seen: dict[str, list[dict[str, Any]]] = {}
        for event in audits(cluster):
            seen.setdefault(event["action"], []).append(event)
        return seen

    async def all_written() -> bool:
        seen = written()
        return (
            any(e.get("path") == "/v1/topics/orders-paid/messages" for e in seen.get("unauthorized", []))
            and any(e.get("key_id") == producer["key_id"] for e in seen.get("forbidden", []))
            and sum(e.get("key_name") == "ops" for e in seen.get("admin_call", [])) >= 2
            and {"ops", "orders-producer", "orders-consumer"}
            <= {e.get("key_name") for e in seen.get("key_created", [])}
        )

    await eventually(all_written, "audit events of the 401, the 403, the admin calls and the keys made", timeout=10)
    seen = written()
    (no_key,) = [e for e in seen["unauthorized"] if e.get("path") == "/v1/topics/orders-paid/messages"]
    assert (no_key["status"], no_key["method"], no_key.get("key_id")) == (401, "POST", None)
    assert "needs an API key" in no_key["reason"]
    (forbidden,) = [e for e in seen["forbidden"] if e.get("key_id") == producer["key_id"]]
    assert (forbidden["status"], forbidden["operation"], forbidden["key_name"]) == (
        403,
        "receiveMessages",
        "orders-producer",
    )
    admin_calls = {(e["operation"], e["path"], e["status"]) for e in seen["admin_call"] if e["key_name"] == "ops"}
    assert admin_calls == {("putTopic", "/v1/topics/orders-paid", 201), ("putGroup", "/v1/groups/orders-billing", 201)}
    made = {e["key_name"]: e for e in seen["key_created"]}
    assert (made["orders-producer"]["service"], made["orders-producer"]["key_id"]) == ("cli", producer["key_id"])


async def test_a_revoked_key_is_refused_within_seconds_and_listed_revoked(
    cluster: UpCluster, gateway: httpx.AsyncClient
) -> None:
    producer = create_key(cluster, "shipping-producer", "pub:orders*")
    send = "/v1/topics/orders-shipped/messages"
    first = await gateway.post(send, json={"body": "shipped"}, headers=bearer(producer["key"]))
    assert first.status_code == 201, first.text

    revoked = keys(cluster, "revoke", producer["key_id"])
    assert revoked.stdout.strip() == f"revoked {producer['key_id']} (shipping-producer)"

    async def refused() -> bool:
        answer = await gateway.post(send, json={"body": "after"}, headers=bearer(producer["key"]))
        return answer.status_code == 401

    await eventually(refused, "the revoked key's sends refused", timeout=REVOCATION_SECONDS)
    answer = await gateway.post(send, json={"body": "after"}, headers=bearer(producer["key"]))
    assert answer.json()["detail"] == f"the API key {producer['key_id']} was revoked"

    (listed,) = [line for line in keys(cluster, "list").stdout.splitlines() if line.startswith(producer["key_id"])]
    assert listed.split()[1:5] == ["shipping-producer", "revoked", "allow", "pub:orders*"], listed
    (details,) = [k for k in json.loads(keys(cluster, "list", "--json").stdout) if k["key_id"] == producer["key_id"]]
    assert details["revoked_at"] is not None

    def of_the_key(action: str) -> list[dict[str, Any]]:
        return [e for e in audits(cluster) if e["action"] == action and e.get("key_id") == producer["key_id"]]

    async def written() -> bool:
        return bool(of_the_key("key_revoked")) and bool(of_the_key("unauthorized"))

    await eventually(written, "audit events of the revocation and of the refused sends", timeout=10)
    assert of_the_key("key_revoked")[0]["service"] == "cli"
    assert all("was revoked" in e["reason"] and e["path"] == send for e in of_the_key("unauthorized"))


def test_auth_off_on_an_address_others_reach_is_refused_before_any_process_starts(tmp_path: Path) -> None:
    argv = ["up", "--host", "0.0.0.0", "--data-dir", str(tmp_path / "data"), "--gateway-port", str(free_port())]
    done = petrel(*argv, env=petrel_env(PETREL_AUTH="off"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("[petrel] could not start the cluster: PETREL_AUTH=off on 0.0.0.0, which other hosts")
    assert "petrel up --insecure-no-auth" in done.stderr
    assert not (tmp_path / "data" / "logs").exists(), f"a process was started:\n{done.stdout}"


def test_insecure_no_auth_starts_a_gateway_open_to_anyone_beyond_loopback(tmp_path: Path) -> None:
    """The gateway `petrel up --host 0.0.0.0 --insecure-no-auth` plans, with PETREL_AUTH=off: it starts, and answers
    a call with no key (the key list, which needs no broker)."""
    options = UpOptions(data_dir=tmp_path / "data", host="0.0.0.0", gateway_port=free_port(), insecure_no_auth=True)
    ensure_token_file(options.token_file)  # as petrel up does: a service beyond loopback needs the cluster token
    (planned,) = [s for s in plan_cluster(options, "redis://127.0.0.1:6379/0") if s.name == "gateway"]
    spec = dataclasses.replace(planned, env=planned.env | {"PETREL_AUTH": "off"})
    supervisor = Supervisor(options.data_dir, say=lambda _: None)
    try:
        supervisor.start(spec)
        listed = httpx.get(f"http://127.0.0.1:{options.gateway_port}/v1/keys", timeout=10)
    finally:
        supervisor.stop_all()
    assert listed.status_code == 200, listed.text
