"""Every `/v1` operation, with every spelling of a name an attacker tries: the internal call reaches the resource
the permission check named, or the request is refused (issue 25, finding 1).

The operations come from the gateway's own spec (a new one is walked without a word
here), on the hot path and through FastAPI. Each name in a path (topic, group) is
spelled percent-encoded, double- and triple-encoded, with dot segments (`..%2F`,
`%2e%2e`), as overlong UTF-8 (`%C0%AE`), and in Unicode forms that NFKC folds to
`payroll` (fullwidth, a modifier letter); ids get the same treatment; body and query
fields that carry names too. The key may do everything but touch `payroll`.

The brokers, the nameserver and the push service are real, each behind a CallRecorder
(tests.support.internal_calls) that notes what its router made of each request; the
gateway's permission check is watched where it names a resource (Principal.require).
Every topic, group or message id an internal service acted on must be one the check
named (a group's retry or DLQ topic: the group; another system topic: the cluster), or
a path parameter no permission covers, exactly as the gateway decoded it. Every
attacker's spelling is refused (4xx), and no call leaves for an address that is not
one of the cluster's.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx
import pytest
from starlette.types import ASGIApp

from gateway.app import create_app
from gateway.auth import route
from gateway.auth.needs import NEEDS
from gateway.auth.principal import Principal
from gateway.settings import GatewaySettings
from libs.auth.grants import Action, ResourceKind
from libs.http.asgi import running
from libs.http.transport import BinaryResponse, Call, Transport
from libs.names import DLQ_PREFIX, NAME_PATTERN, RETRY_PREFIX, SYSTEM_TOPICS
from services.broker.app import create_app as broker_app
from services.broker.settings import BrokerSettings
from services.nameserver.app import create_app as nameserver_app
from services.nameserver.settings import NameserverSettings
from tests.support.api_keys import bearer, issue_key
from tests.support.apps import in_process
from tests.support.internal_calls import CallRecorder, InternalCall
from tests.support.push_subscriptions import RecordingLive, subscriptions_app
from tests.support.serving import ServedApp, free_port, serving

pytestmark = pytest.mark.asyncio

PUBLIC_URL = "http://93.184.216.34/petrel"
TARGET = "payroll"
"""The one name the walking key may not touch (as topic or group)."""
NAME_SPELLINGS = {
    "encoded": "%70ayroll",
    "double-encoded": "%2570ayroll",
    "triple-encoded": "%252570ayroll",
    "encoded slash": "..%2Fpayroll",
    "dot segment": "%2e%2e",
    "dot segment up": "%2e%2e%2fpayroll",
    "dots encoded twice": "%252e%252e%252fpayroll",
    "overlong dots": "%C0%AE%C0%AE%2Fpayroll",
    "overlong p": "%C1%B0ayroll",
    "fullwidth": quote("\uff50\uff41\uff59\uff52\uff4f\uff4c\uff4c"),
    "modifier letter": quote("\u1d56ayroll"),
    "half topic": "RMQ_SYS_TRANS_HALF_TOPIC",
    "half topic encoded": "%2552MQ_SYS_TRANS_HALF_TOPIC",
    "schedule encoded": "%2553CHEDULE_TOPIC_XXXX",
    "dlq": "%25DLQ%25payroll",
    "dlq encoded": "%2525DLQ%2525payroll",
    "retry encoded": "%2525RETRY%2525payroll",
}
"""A path segment as the attacker sends it (the test's client passes `%XX` through as it is)."""
ZERO_ID = "0" * 32
ID_SPELLINGS = {
    "double-encoded": "%2530" + "0" * 31,
    "encoded slash": "..%2F" + ZERO_ID,
    "dot segment": "%2e%2e",
    "fullwidth digits": quote("\uff10" * 32),
}
TRANSACTION_SPELLINGS = {
    "broker up a level": "..%2Fbroker-a:" + ZERO_ID,
    "broker as an address": "127.0.0.1%3A{port}:" + ZERO_ID,
    "id double-encoded": "broker-a:%2530" + "0" * 31,
    "offset double-encoded": "broker-a:" + ZERO_ID + "%252E0",
    "offset up a level": "broker-a:" + ZERO_ID + ".0%2F..",
}
FIELD_SPELLINGS = ["%70ayroll", "../payroll", "payroll/../orders", "\uff50\uff41\uff59\uff52\uff4f\uff4c\uff4c"]
"""A name as a body or query field carries it (decoded: JSON and query strings are decoded once anyway)."""
NAME_PARAMS = frozenset({"topic", "group"})
ID_PARAMS = frozenset({"message_id", "key_id"})
LOCAL_OPERATIONS = frozenset({"putProducerGroup", "getProducerGroup", "rotateProducerGroupSecret"})
"""Operations that name a group but call no internal service (producer groups live in the gateway's database)."""


def bodies(ids: dict[str, str]) -> dict[str, dict[str, Any]]:
    """What each operation needs to get past its body checks (else `{}`), so that a plain call reaches a service."""
    handle = ids["receipt_handle"]
    return {
        "sendMessage": {"body": "x"},
        "sendMessageBatch": {"messages": [{"body": "x"}]},
        "receiveMessages": {"max_messages": 1},
        "ackMessages": {"receipt_handles": [handle]},
        "nackMessages": {"receipt_handles": [handle]},
        "changeVisibility": {"receipt_handle": handle, "invisible_seconds": 1},
        "sendTransaction": {"body": "x", "producer_group": "shop"},
        "putProducerGroup": {"checkback_url": PUBLIC_URL},
        "putSubscription": {"endpoint_url": PUBLIC_URL},
        "resetGroupOffsets": {"offset": 0},
        "redriveDeadLetters": {"max_messages": 1},
        "createKey": {"name": "made", "allow": ["sub:orders"]},
    }


QUERIES = {
    "pullMessages": {"broker": "broker-a"},
    "getQueueOffsets": {"broker": "broker-a"},
    "queryMessagesByKey": {"key": "k"},
}


@dataclass
class Watched:
    """What the gateway's permission check named, and the path parameters it was given, during one request."""

    named: set[tuple[ResourceKind, str]] = field(default_factory=set)
    params: dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    operation: str
    method: str
    path: str
    spelling: str
    query: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    attack: bool = True
    """an attacker's spelling that must be refused (4xx)"""


@pytest.fixture(params=[True, False], ids=["hot", "fastapi"])
def hot_path(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def calls() -> list[InternalCall]:
    return []


@pytest.fixture
def nameserver(calls: list[InternalCall]) -> Iterator[ServedApp]:
    """The nameserver served by uvicorn (its decoding is a real server's), its calls recorded."""
    with serving(CallRecorder(nameserver_app(NameserverSettings(port=0)), "nameserver", calls)) as served:
        yield served


class AddressLog:
    """The gateway's transport, noting the address of every call it sends."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.addresses: Counter[str] = Counter()

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def send(self, call: Call) -> BinaryResponse:
        self.addresses[urlsplit(call.url).netloc] += 1
        return await self.inner.send(call)


@dataclass
class Cluster:
    gateway: httpx.AsyncClient
    addresses: AddressLog
    known: set[str]
    admin: dict[str, str]
    ids: dict[str, str]


@pytest.fixture
async def cluster(
    nameserver: ServedApp,
    broker_configs: dict[str, BrokerSettings],
    in_process_apps: dict[str, ASGIApp],
    transport: Transport,
    calls: list[InternalCall],
    hot_path: bool,
    tmp_path: Path,
) -> AsyncIterator[Cluster]:
    """A gateway over two brokers and the push service, in-process, every service's calls recorded; seeded."""
    admin = bearer(issue_key(tmp_path, "admin", "pub", "sub", name="root"))
    push_address, timer_address = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    push, _ = subscriptions_app(f"sqlite:///{tmp_path / 'push.db'}", RecordingLive())
    async with AsyncExitStack() as stack:
        for name, broker in broker_configs.items():
            app = CallRecorder(broker_app(broker), name, calls)
            in_process_apps[broker.address] = await stack.enter_async_context(running(app))
        in_process_apps[push_address] = await stack.enter_async_context(running(CallRecorder(push, "push", calls)))
        settings = GatewaySettings(
            nameservers=[nameserver.address],
            push_address=push_address,
            timer_address=timer_address,  # not running: its two operations name no topic or group
            auth="required",
            data_dir=tmp_path,
            hot_path=hot_path,
        )
        addresses = AddressLog(transport)
        gateway = await stack.enter_async_context(
            asynccontextmanager(in_process)(create_app(settings, transport=addresses))
        )
        known = {nameserver.address, push_address, timer_address, *in_process_apps}
        yield Cluster(gateway, addresses, known, admin, await _seed(gateway, admin))
        in_process_apps.clear()


async def _seed(gateway: httpx.AsyncClient, admin: dict[str, str]) -> dict[str, str]:
    """Topics, groups, a producer group, subscriptions, a message and a transaction; their ids."""
    ids: dict[str, str] = {}
    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("PUT", "/v1/topics/orders", {"queues": 1}),
        ("PUT", f"/v1/topics/{TARGET}", {"queues": 1}),
        ("PUT", "/v1/groups/billing", None),
        ("PUT", f"/v1/groups/{TARGET}", None),
        ("PUT", "/v1/producer-groups/shop", {"checkback_url": PUBLIC_URL}),
        ("PUT", "/v1/groups/billing/subscriptions/orders", {"endpoint_url": PUBLIC_URL}),
        ("PUT", f"/v1/groups/{TARGET}/subscriptions/{TARGET}", {"endpoint_url": PUBLIC_URL}),
    ]
    for method, path, body in calls:
        answer = await gateway.request(method, path, json=body, headers=admin)
        assert answer.status_code in (200, 201), f"{method} {path}: {answer.text}"
    sent = await gateway.post("/v1/topics/orders/messages", json={"body": "x", "keys": ["k"]}, headers=admin)
    ids["message_id"] = sent.json()["message_id"]
    half = await gateway.post(
        "/v1/topics/orders/transactions", json={"body": "x", "producer_group": "shop"}, headers=admin
    )
    ids["transaction_id"] = half.json()["transaction_id"]
    got = await gateway.post("/v1/groups/billing/topics/orders/receive", json={"max_messages": 1}, headers=admin)
    ids["receipt_handle"] = got.json()["messages"][0]["receipt_handle"]
    made = await gateway.post("/v1/keys", json={"name": "spare", "allow": ["sub:orders"]}, headers=admin)
    ids["key_id"] = made.json()["key_id"]
    return ids


def operations(spec: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(operationId, method, path template) of every /v1 operation; the destructive ones last."""
    found = [
        (operation["operationId"], method.upper(), path)
        for path, methods in spec["paths"].items()
        if path.startswith("/v1/")
        for method, operation in methods.items()
    ]
    return sorted(found, key=lambda op: (op[1] == "DELETE" or op[0] == "revokeKey", op[2], op[1]))


def requests_of(operation: str, method: str, template: str, cluster: Cluster, port: int) -> Iterator[Request]:
    """The plain call of the operation, then each parameter spelled each way, then its name-carrying fields."""
    plain = {"topic": "orders", "group": "billing", "queue_id": "0"} | cluster.ids
    body = bodies(cluster.ids).get(operation, {}) if method in ("POST", "PUT") else None
    query = QUERIES.get(operation, {})

    def fill(**spelled: str) -> str:
        return re.sub(r"\{(\w+)\}", lambda m: spelled.get(m[1], plain[m[1]]), template)

    yield Request(operation, method, fill(), "plain", query, body, attack=False)
    for param in re.findall(r"\{(\w+)\}", template):
        for how, spelled in spellings(param, port).items():
            attack = must_refuse(operation, param, unquote(spelled))
            yield Request(operation, method, fill(**{param: spelled}), f"{param} {how}", query, body, attack)
    for value in FIELD_SPELLINGS:
        if operation == "sendTransaction":
            named = (body or {}) | {"producer_group": value}
            yield Request(operation, method, fill(), "producer_group field", body=named)
        if operation in ("pullMessages", "getQueueOffsets"):
            yield Request(operation, method, fill(), "broker query", {"broker": value})
        if operation == "queryMessagesByKey":  # any text is a key: it travels as a query value, never in a path
            yield Request(operation, method, fill(), "key query", {"key": value}, attack=False)
        if operation == "redriveDeadLetters":  # ids in a JSON body: matched, never put into a path
            yield Request(operation, method, fill(), "message_ids field", {}, {"message_ids": [value]}, attack=False)


def spellings(param: str, port: int) -> dict[str, str]:
    if param in NAME_PARAMS:
        return {"target": TARGET} | NAME_SPELLINGS
    if param in ID_PARAMS:
        return ID_SPELLINGS
    if param == "transaction_id":
        return {how: spelled.format(port=port) for how, spelled in TRANSACTION_SPELLINGS.items()}
    return {}


def must_refuse(operation: str, param: str, decoded: str) -> bool:
    """Whether the name, decoded once as the gateway decodes it, must be refused.

    `payroll` itself is refused where a permission names the parameter (whether an unchecked
    one should be is a question of scopes, not of decoding); a name that is valid as it is
    (a group called RMQ_SYS_TRANS_HALF_TOPIC; a system topic described) may pass;
    everything else breaks the name rules.
    """
    if decoded == TARGET:
        return param in {need.param for need in NEEDS[operation]}
    if param == "group" and re.fullmatch(NAME_PATTERN, decoded):
        return False
    return not (operation == "getTopic" and decoded in SYSTEM_TOPICS)


def stray_names(calls: list[InternalCall], watched: Watched, operation: str) -> list[str]:
    """The names internal services acted on that the permission check did not name, each as `service: kind name`."""
    unchecked = {v for p, v in watched.params.items() if p not in {n.param for n in NEEDS[operation]}}
    ids = {v.rpartition(":")[2].partition(".")[0] for v in watched.params.values()}  # a transaction id's message id
    stray = []
    for call in calls:
        for kind, name in call.names("topic", "group", "message_id"):
            if kind == "message_id":
                ok = name in ids
            else:
                owner = owning_group(name) if kind == "topic" else None
                ok = (
                    (kind, name) in watched.named
                    or (owner is not None and ("group", owner) in watched.named)
                    or (kind == "topic" and name in SYSTEM_TOPICS and ("cluster", "*") in watched.named)
                    or name in unchecked
                )
            if not ok:
                stray.append(f"{call.service} {call.method} {call.path}: {kind} {name!r}")
    return stray


def owning_group(topic: str) -> str | None:
    """The group a retry or DLQ topic belongs to."""
    prefix = next((p for p in (RETRY_PREFIX, DLQ_PREFIX) if topic.startswith(p)), None)
    return None if prefix is None else topic.removeprefix(prefix)


def watch_checks(monkeypatch: pytest.MonkeyPatch) -> Watched:
    """Watched, filled by the gateway's own checks (they run as they are: this only notes what they name)."""
    watched = Watched()
    require, check = Principal.require, route.check

    def noted_require(self: Principal, actions: tuple[Action, ...], kind: ResourceKind, name: str = "*") -> None:
        watched.named.add((kind, name))
        require(self, actions, kind, name)

    def noted_check(principal: Principal, needs: Any, path_params: dict[str, Any]) -> None:
        watched.params.update({k: str(v) for k, v in path_params.items()})
        check(principal, needs, path_params)

    monkeypatch.setattr(Principal, "require", noted_require)
    monkeypatch.setattr(route, "check", noted_check)
    return watched


async def test_every_operation_reaches_only_what_its_check_named(
    cluster: Cluster, calls: list[InternalCall], nameserver: ServedApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = (await cluster.gateway.get("/openapi.json")).json()
    deny = tuple(f"{action.value}:{TARGET}" for action in Action)
    key = bearer(issue_key(tmp_path, "pub", "sub", "admin", deny=deny, name="walker"))
    watched = watch_checks(monkeypatch)
    ops = operations(spec)
    assert {op for op, _, _ in ops} == set(NEEDS), "the spec's operations and the permission table differ"
    wrong: list[str] = []
    reached: set[str] = set()
    sent = 0
    for operation, method, template in ops:
        for request in requests_of(operation, method, template, cluster, nameserver.port):
            watched.named.clear()
            watched.params.clear()
            before = len(calls)
            answer = await cluster.gateway.request(
                request.method, request.path, params=request.query, json=request.body, headers=key
            )
            sent += 1
            made = calls[before:]
            what = f"{operation} {request.method} {request.path} ({request.spelling}): {answer.status_code}"
            wrong += [f"{what}: reached {name}" for name in stray_names(made, watched, operation)]
            if request.attack and not 400 <= answer.status_code < 500:
                wrong.append(f"{what}, not refused: {answer.text[:200]}")
            if request.spelling == "plain" and made:
                reached.add(operation)
    strangers = set(cluster.addresses.addresses) - cluster.known
    assert not strangers, f"internal calls went to addresses outside the cluster: {sorted(strangers)}"
    assert not wrong, f"{len(wrong)} of {sent} requests:\n" + "\n".join(wrong)
    named_ops = {op for op, _, t in ops if NAME_PARAMS & set(re.findall(r"\{(\w+)\}", t))}
    idle = named_ops - reached - LOCAL_OPERATIONS
    assert not idle, f"the plain calls of these operations reached no service, so nothing was tested: {sorted(idle)}"
    print(f"\n{len(ops)} operations, {sent} requests; plain calls that reached a service: {len(reached)}")
