"""On a real `petrel up` cluster, every internal service refuses whoever lacks the cluster token or calls it by a name.

Table-driven over the committed specs (openapi/<service>.json): every operation
of every internal service is called without the token and with a wrong one
(placeholders filled with dummy values); each answer must be 401, before any
routing or validation. Health, readiness and metrics stay open; a rogue broker
cannot register; the token never shows on a command line or in an environment.
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from libs.cluster_token import INTERNAL_TOKEN_HEADER, TOKEN_FILE_SETTING
from libs.http.middleware import OPEN_PATHS
from tests.support.petrel_up import UpCluster, petrel_up

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
INTERNAL_SERVICES = ("nameserver", "broker", "timer", "txcheck", "push")
DUMMY_INTEGER = "0"
DUMMY_STRING = "dummy"
REBINDING_HOST = "rebind.attacker.example"
ROGUE_ADDRESS = "203.0.113.66:10911"


class Operation(NamedTuple):
    service: str
    method: str
    path: str
    """the spec's path, placeholders filled with dummy values"""


def operations() -> list[Operation]:
    found = []
    for service in INTERNAL_SERVICES:
        spec = json.loads((ROOT / "openapi" / f"{service}.json").read_text())
        for template, methods in spec["paths"].items():
            for method, operation in methods.items():
                if template not in OPEN_PATHS:
                    found.append(Operation(service, method.upper(), filled(template, operation)))
    return found


def filled(template: str, operation: dict[str, Any]) -> str:
    kinds = {p["name"]: p.get("schema", {}).get("type") for p in operation.get("parameters", []) if p["in"] == "path"}

    def dummy(match: re.Match[str]) -> str:
        return DUMMY_INTEGER if kinds.get(match.group(1)) == "integer" else DUMMY_STRING

    return re.sub(r"\{([^}]+)\}", dummy, template)


OPERATIONS = operations()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpCluster]:
    with petrel_up(tmp_path_factory.mktemp("internal-access"), "--no-etl") as running:
        yield running


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


def call(http: httpx.Client, cluster: UpCluster, operation: Operation, **headers: str) -> httpx.Response:
    body = b"{}" if operation.method in {"POST", "PUT", "PATCH"} else None
    return http.request(
        operation.method,
        cluster.url(operation.service) + operation.path,
        content=body,
        headers={"content-type": "application/json"} | headers,
    )


def test_the_table_covers_every_internal_service() -> None:
    # txcheck's HTTP process serves only health, readiness and metrics: the paths below cover it
    assert {op.service for op in OPERATIONS} == set(INTERNAL_SERVICES) - {"txcheck"}
    assert len(OPERATIONS) > 50, "the specs lost their operations"


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: f"{op.service} {op.method} {op.path}")
def test_every_operation_refuses_a_call_without_the_token_or_with_a_wrong_one(
    cluster: UpCluster, http: httpx.Client, operation: Operation
) -> None:
    for headers in ({}, {INTERNAL_TOKEN_HEADER: "not-the-cluster-token"}):
        answer = call(http, cluster, operation, **headers)
        assert answer.status_code == 401, f"{headers or 'no token'}: {answer.status_code} {answer.text[:300]}"
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["detail"] == f"missing or wrong {INTERNAL_TOKEN_HEADER} header"


@pytest.mark.parametrize("service", INTERNAL_SERVICES)
@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json", "/nope", "/internal/nope", "/healthz/"])
def test_docs_and_paths_no_route_serves_need_the_token_too(
    cluster: UpCluster, http: httpx.Client, service: str, path: str
) -> None:
    assert http.get(cluster.url(service) + path).status_code == 401
    with_token = http.get(cluster.url(service) + path, headers=cluster.internal_headers())
    assert with_token.status_code != 401, f"the right token is refused on {service} {path}"


@pytest.mark.parametrize("service", INTERNAL_SERVICES)
def test_health_readiness_and_metrics_stay_open(cluster: UpCluster, http: httpx.Client, service: str) -> None:
    assert http.get(cluster.url(service) + "/healthz").json()["status"] == "ok"
    assert http.get(cluster.url(service) + "/readyz").status_code in {200, 503}
    assert "petrel_http_requests_total" in http.get(cluster.url(service) + "/metrics").text


def test_the_cluster_works_with_the_token_its_services_read(cluster: UpCluster, http: httpx.Client) -> None:
    created = http.put(f"{cluster.gateway}/v1/topics/access-orders")
    assert created.status_code == 201, created.text  # the gateway called the nameserver and the broker with it

    route = http.get(f"{cluster.nameserver}/internal/routes/access-orders", headers=cluster.internal_headers())
    assert route.status_code == 200, route.text
    assert {q["broker_name"] for q in route.json()["queues"]} == {"broker-a"}  # the broker registered with it


def test_a_rogue_broker_cannot_register_and_the_route_table_is_unchanged(
    cluster: UpCluster, http: httpx.Client
) -> None:
    assert http.put(f"{cluster.gateway}/v1/topics/rogue-target").status_code in {200, 201}

    def table() -> tuple[dict[str, list[str]], list[str]]:
        internal = cluster.internal_headers()
        listing = http.get(f"{cluster.nameserver}/internal/clusters", headers=internal).json()
        route = http.get(f"{cluster.nameserver}/internal/routes/rogue-target", headers=internal).json()
        brokers = {c["name"]: sorted(b["broker_name"] for b in c["brokers"]) for c in listing["clusters"]}
        return brokers, sorted(b["broker_name"] for b in route["brokers"])

    before = table()
    registration = {
        "cluster": "DefaultCluster",
        "address": ROGUE_ADDRESS,
        "data_version": 1,
        "topics": [{"name": "rogue-target", "read_queues": 8, "write_queues": 8}],
    }
    for headers in ({}, {INTERNAL_TOKEN_HEADER: "guessed"}):
        answer = http.put(f"{cluster.nameserver}/internal/brokers/broker-rogue/0", json=registration, headers=headers)
        assert answer.status_code == 401, answer.text

    assert table() == before == ({"DefaultCluster": ["broker-a"]}, ["broker-a"])


@pytest.mark.parametrize("service", INTERNAL_SERVICES)
def test_an_internal_service_called_by_a_name_it_does_not_know_refuses_even_with_the_token(
    cluster: UpCluster, http: httpx.Client, service: str
) -> None:
    for path in ("/healthz", "/internal/clusters"):
        headers = cluster.internal_headers() | {"host": f"{REBINDING_HOST}:{cluster.ports[service]}"}
        answer = http.get(cluster.url(service) + path, headers=headers)
        assert answer.status_code == 400, answer.text
        problem = answer.json()
        assert problem["type"] == "https://petrel.dev/problems/host-not-allowed"
        assert (problem["host"], problem["setting"]) == (headers["host"], "PETREL_ALLOWED_HOSTS")
    by_localhost = http.get(f"http://localhost:{cluster.ports[service]}/healthz")
    assert by_localhost.status_code == 200


def test_the_gateway_without_keys_answers_only_to_loopback_names(cluster: UpCluster, http: httpx.Client) -> None:
    for path in ("/healthz", "/v1/topics"):
        answer = http.get(f"{cluster.gateway}{path}", headers={"host": f"{REBINDING_HOST}:{cluster.ports['gateway']}"})
        assert answer.status_code == 400, answer.text
        assert answer.json()["type"] == "https://petrel.dev/problems/host-not-allowed"
        by_localhost = http.get(f"http://localhost:{cluster.ports['gateway']}{path}")
        assert by_localhost.status_code == 200, by_localhost.text


def test_the_token_is_in_a_private_file_and_on_no_command_line_environment_or_log(cluster: UpCluster) -> None:
    token = cluster.internal_headers()[INTERNAL_TOKEN_HEADER]
    assert stat.S_IMODE(cluster.token_file.stat().st_mode) == 0o600
    pids = cluster.all_pids()
    assert len(pids) >= 8, cluster.state()
    for pid in pids:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert token.encode() not in command, f"pid {pid}: the token is on its command line"
        assert not any(token.encode() in variable for variable in environment), f"pid {pid}: the token is in its env"
        assert f"{TOKEN_FILE_SETTING}={cluster.token_file}".encode() in environment
    assert token not in cluster.output.read_text()
    for log in (cluster.data_dir / "logs").glob("*.log"):
        assert token not in log.read_text(errors="replace"), f"the token is in {log.name}"
