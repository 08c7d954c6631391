"""A name in a `/v1` path is decoded once, at the edge (issue 25, finding 1).

The report: a key with `allow sub` and `deny sub:payroll` read payroll with
`GET /v1/topics/%2570ayroll/queues/0/messages`. The edge decoded `%2570ayroll` to
`%70ayroll`, let the `%` through and checked the key against that; the internal
clients put it raw into their paths and the brokers decoded it again, to `payroll`.
The same spelling read the transactions' half messages, every scheduled message, and
any group's retry and DLQ topics. Now a name with a `%` left in it is no user topic's
(400), a system topic's messages are read through their own routes only, and the one
route that names a system topic (describing it) checks the group or cluster it belongs to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.api_keys import bearer, issue_key
from tests.support.gateway_calls import problem_type

pytestmark = pytest.mark.asyncio

PUBLIC_URL = "http://93.184.216.34/petrel"
"""A literal public address: the egress guard takes it without resolving a name."""
BROKERS = ("broker-a", "broker-b")
SECRETS = ("salary", "due later", "uncommitted", "poison")
"""The bodies of payroll's message, the scheduled one, the half message and the dead letter."""


@pytest.fixture(params=[True, False], ids=["hot", "fastapi"])
def hot_path(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def gateway_overrides(tmp_path: Path) -> dict[str, Any]:
    return {"auth": "required", "data_dir": tmp_path}


@pytest.fixture
def admin(tmp_path: Path) -> dict[str, str]:
    return bearer(issue_key(tmp_path, "admin", "pub", "sub", name="root"))


@pytest.fixture
async def secrets(gateway: httpx.AsyncClient, admin: dict[str, str]) -> None:
    """payroll's message, a scheduled message, a half message, and a dead letter of group `abc` (hex digits)."""
    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("PUT", "/v1/topics/payroll", {"queues": 1}),
        ("PUT", "/v1/topics/orders", {"queues": 1}),
        ("POST", "/v1/topics/payroll/messages", {"body": "salary"}),
        ("POST", "/v1/topics/orders/messages", {"body": "due later", "delay_level": 4}),
        ("PUT", "/v1/producer-groups/shop", {"checkback_url": PUBLIC_URL}),
        ("POST", "/v1/topics/orders/transactions", {"body": "uncommitted", "producer_group": "shop"}),
        ("PUT", "/v1/groups/abc", {"max_retries": 0}),
        ("POST", "/v1/topics/orders/messages", {"body": "poison"}),
    ]
    for method, path, body in calls:
        answer = await gateway.request(method, path, json=body, headers=admin)
        assert answer.status_code in (200, 201), f"{method} {path}: {answer.text}"
    got = await gateway.post("/v1/groups/abc/topics/orders/receive", json={"max_messages": 32}, headers=admin)
    (poison,) = [m for m in got.json()["messages"] if m["body"] == "poison"]
    nacked = await gateway.post(
        "/v1/groups/abc/nack", json={"receipt_handles": [poison["receipt_handle"]]}, headers=admin
    )
    assert nacked.json()["results"][0]["ok"], nacked.text


async def reads(gateway: httpx.AsyncClient, key: dict[str, str], spelled: str, queues: int) -> list[httpx.Response]:
    """A pull of every queue below `queues` on every broker, and a key query, of the topic spelled so in the path."""
    answers = [
        await gateway.get(f"/v1/topics/{spelled}/queues/{queue}/messages", params={"broker": broker}, headers=key)
        for broker in BROKERS
        for queue in range(queues)
    ]
    answers.append(await gateway.get(f"/v1/topics/{spelled}/messages", params={"key": "k"}, headers=key))
    return answers


@pytest.mark.usefixtures("secrets")
async def test_a_double_encoded_name_does_not_walk_past_a_deny(gateway: httpx.AsyncClient, tmp_path: Path) -> None:
    key = bearer(issue_key(tmp_path, "sub", deny=("sub:payroll",), name="no-payroll"))

    for answer in await reads(gateway, key, "%2570ayroll", 1):
        assert (answer.status_code, problem_type(answer)) == (400, "invalid-topic-name"), answer.text
        assert "'%70ayroll' is invalid" in answer.json()["detail"]
        assert "salary" not in answer.text
    for answer in await reads(gateway, key, "%70ayroll", 1):  # encoded once: it is payroll, and the deny holds
        assert (answer.status_code, problem_type(answer)) == (403, "forbidden"), answer.text
    described = await gateway.get("/v1/topics/%2570ayroll", headers=key)
    assert (described.status_code, problem_type(described)) == (400, "invalid-topic-name"), described.text


@pytest.mark.usefixtures("secrets")
@pytest.mark.parametrize(
    ("spelled", "queues"),
    [
        ("%2552MQ_SYS_TRANS_HALF_TOPIC", 1),
        ("%2553CHEDULE_TOPIC_XXXX", 4),
        ("%2525DLQ%2525abc", 1),
        ("%2525RETRY%2525abc", 1),
        ("%252525DLQ%252525abc", 1),
    ],
)
async def test_system_topics_are_not_read_through_an_encoding(
    gateway: httpx.AsyncClient, tmp_path: Path, spelled: str, queues: int
) -> None:
    key = bearer(issue_key(tmp_path, "sub", name="reader"))

    for answer in await reads(gateway, key, spelled, queues):
        assert (answer.status_code, problem_type(answer)) == (400, "invalid-topic-name"), answer.text
        assert not [secret for secret in SECRETS if secret in answer.text]


@pytest.mark.usefixtures("secrets")
@pytest.mark.parametrize(
    ("spelled", "reader"),
    [
        ("RMQ_SYS_TRANS_HALF_TOPIC", "/v1/transactions"),
        ("SCHEDULE_TOPIC_XXXX", "once it is due"),
        ("%25DLQ%25abc", "GET /v1/groups/abc/dlq"),
        ("%25RETRY%25abc", "group 'abc' receives them"),
    ],
)
async def test_a_system_topic_named_as_itself_is_refused_naming_its_reader(
    gateway: httpx.AsyncClient, tmp_path: Path, spelled: str, reader: str
) -> None:
    key = bearer(issue_key(tmp_path, "sub", name="reader"))

    for answer in await reads(gateway, key, spelled, 1):
        assert (answer.status_code, problem_type(answer)) == (400, "reserved-topic-name"), answer.text
        assert reader in answer.json()["detail"]


@pytest.mark.usefixtures("secrets")
async def test_describing_a_system_topic_needs_the_group_or_the_cluster_it_belongs_to(
    gateway: httpx.AsyncClient, tmp_path: Path
) -> None:
    topics_only = bearer(issue_key(tmp_path, "sub:topic/*", "admin:topic/*", name="topics"))
    group_abc = bearer(issue_key(tmp_path, "sub:group/abc", name="abc"))
    cluster = bearer(issue_key(tmp_path, "admin", name="operator"))

    for spelled, required in [("%25DLQ%25abc", "sub:group/abc"), ("SCHEDULE_TOPIC_XXXX", "admin")]:
        refused = await gateway.get(f"/v1/topics/{spelled}", headers=topics_only)
        assert (refused.status_code, problem_type(refused)) == (403, "forbidden"), refused.text
        assert required in refused.json()["required"]
    dlq = await gateway.get("/v1/topics/%25DLQ%25abc", headers=group_abc)
    assert dlq.status_code == 200, dlq.text
    assert dlq.json()["topic"] == "%DLQ%abc"  # its `%ab` was never read as a byte
    assert (await gateway.get("/v1/topics/SCHEDULE_TOPIC_XXXX", headers=group_abc)).status_code == 403
    assert (await gateway.get("/v1/topics/SCHEDULE_TOPIC_XXXX", headers=cluster)).status_code == 200

    listed = await gateway.get("/v1/topics", params={"include_system": "true"}, headers=group_abc)
    assert sorted(t["topic"] for t in listed.json()["topics"]) == ["%DLQ%abc", "%RETRY%abc"]
    for junk in ("%2570ayroll", "%25DLQ%25", "%25DLQ%25a%25b", "rmq_sys_other"):
        answer = await gateway.get(f"/v1/topics/{junk}", headers=cluster)
        assert answer.status_code == 400, f"{junk}: {answer.text}"
