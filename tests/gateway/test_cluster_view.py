"""GET /v1/cluster: each broker name's master and slaves, their roles, in-sync sets and lag, as they say it."""

from __future__ import annotations

from typing import Any

import httpx
from starlette.types import ASGIApp

from tests.support.replication import in_sync_slave
from tests.support.serving import ServedApp, free_port


async def test_the_cluster_lists_each_masters_slaves_with_their_roles_and_lag(
    gateway: httpx.AsyncClient, nameserver: ServedApp, brokers: dict[str, Any], in_process_apps: dict[str, ASGIApp]
) -> None:
    master = brokers["broker-a"]
    async with in_sync_slave(nameserver, master, in_process_apps):
        answer = await gateway.get("/v1/cluster")

    assert answer.status_code == 200, answer.text
    view = {b["broker_name"]: b for b in answer.json()["brokers"]}
    assert sorted(view) == ["broker-a", "broker-b"]
    a = view["broker-a"]
    assert a["master"] == master.address
    assert [(i["broker_id"], i["reachable"], i["replication"]["role"]) for i in a["instances"]] == [
        (0, True, "ASYNC_MASTER"),
        (1, True, "SLAVE"),
    ]
    assert a["instances"][0]["replication"]["in_sync"] == [1]
    assert [(s["slave_id"], s["lag_bytes"], s["lag_ms"]) for s in a["instances"][0]["replication"]["slaves"]] == [
        (1, 0, 0)
    ]
    assert a["instances"][1]["replication"]["lag_bytes"] == 0
    assert [i["replication"]["slaves"] for i in view["broker-b"]["instances"]] == [[]]


async def test_a_broker_that_does_not_answer_is_listed_unreachable_with_why(
    gateway: httpx.AsyncClient, nameserver: ServedApp, brokers: dict[str, Any]
) -> None:
    gone = f"127.0.0.1:{free_port()}"  # a slave killed -9: still registered, nobody listening
    registration = {"cluster": "DefaultCluster", "address": gone, "data_version": 0, "topics": []}
    async with httpx.AsyncClient(base_url=nameserver.url) as to_nameserver:
        assert (await to_nameserver.put("/internal/brokers/broker-b/1", json=registration)).status_code == 200

    answer = await gateway.get("/v1/cluster")

    assert answer.status_code == 200, answer.text
    b = next(b for b in answer.json()["brokers"] if b["broker_name"] == "broker-b")
    assert [(i["broker_id"], i["reachable"]) for i in b["instances"]] == [(0, True), (1, False)]
    assert b["instances"][1]["replication"] is None
    assert gone in b["instances"][1]["problem"]
