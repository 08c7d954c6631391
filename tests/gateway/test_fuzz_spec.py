"""Schemathesis over the gateway's whole spec: every operation answers what the spec says, and never a 5xx.

Each operation of the gateway's own spec gets a bounded number of generated requests,
valid ones and (negative mode) ones the schema forbids, drawn from a fixed seed. Every
answer is checked: not a server error; a status, content type, headers and body the
operation documents. The cluster (a gateway, two brokers, the push service's API and
the timer service) runs in this process, on an event loop of its own (an anyio portal
thread): Hypothesis draws and checks in the test's thread, the portal runs each call.
A topic, a consumer group, a producer group and a push subscription named `0` (the
name Hypothesis draws first) exist before the run, so that calls get past "not found".

Names are decoded once (issue 25): every answer is also checked by `names_decoded_once`
(no 2xx for a topic or group in the path that breaks the name rules once decoded), and
the first generated call of each operation naming a topic or group is sent again with
that name spelled as an attacker spells it (ENCODED_NAMES).
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import httpx
import pytest
import schemathesis
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode, checks
from schemathesis.checks import CheckFunction
from schemathesis.core.failures import FailureGroup
from starlette.types import ASGIApp

from gateway.app import create_app
from gateway.messages.idempotency import MAX_KEY_LENGTH
from gateway.settings import GatewaySettings
from libs.http.asgi import AsgiTransport, running
from libs.http.lean_transport import LeanTransport
from libs.http.transport import Transport
from libs.names import DLQ_PREFIX, NAME_PATTERN, RETRY_PREFIX, SYSTEM_TOPICS, is_system_topic
from services.broker.app import create_app as broker_app
from services.broker.settings import BrokerSettings
from services.timer.app import create_app as timer_app
from services.timer.settings import TimerSettings
from tests.support.api_keys import bearer, issue_key
from tests.support.apps import in_process
from tests.support.examples import examples
from tests.support.push_subscriptions import RecordingLive, subscriptions_app
from tests.support.serving import ServedApp, free_port

EXAMPLES = examples(12)
"""Generated requests per operation and generation mode: the run stays within about a minute on two cores."""
LONG_POLL_MS = 50
"""A generated long poll waits at most this long: the spec allows 30 s, the run's budget does not."""
MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
NAME_PARAMS = ("topic", "group")
ENCODED_NAMES = (
    "%2530",
    "%252530",
    "%2e%2e",
    "%C0%B0",
    quote("\uff10"),
    "%2552MQ_SYS_TRANS_HALF_TOPIC",
    "%2525DLQ%25250",
    "%25RETRY%250",
    "SCHEDULE_TOPIC_XXXX",
)
"""The seeded name `0` and system topics as an attacker spells them in a path (sent as written): encoded twice and
three times, a dot segment, overlong UTF-8, fullwidth, system topics encoded twice, once, and not at all. (An encoded
`/` makes another path, which no operation documents: tests/gateway/test_names_every_operation.py sends those.)"""
SEED_NAME = "0"
PUBLIC_URL = "http://93.184.216.34/petrel"
"""A literal public address: the egress guard lets it through without resolving a name."""

Case = schemathesis.Case[Any]
Send = Callable[[dict[str, Any]], httpx.Response]


@pytest.fixture
def client_headers(tmp_path: Path) -> dict[str, str]:
    """What every fuzzed request carries besides its generated headers: an API key that may do everything (the
    gateway runs with auth required), made in the run's metadata database before the gateway starts."""
    return bearer(issue_key(tmp_path, "admin", "pub", "sub", rate=0, name="fuzz"))


@dataclass
class FuzzRun:
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    operations: int = 0
    examples: int = 0
    failures: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    examples_of: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        answered = ", ".join(f"{status}: {count}" for status, count in sorted(self.statuses.items()))
        return (
            f"schemathesis: {self.operations} operations, {self.examples} examples, {len(self.failures)} failures"
            f" (answers {answered})"
        )


@contextlib.asynccontextmanager
async def cluster(
    nameserver: ServedApp,
    broker_configs: dict[str, BrokerSettings],
    in_process_apps: dict[str, ASGIApp],
    transport: Transport,
    data_dir: Path,
    headers: dict[str, str],
) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    """The gateway (its app, and a client calling it in-process) over brokers, push and timer in this loop."""
    push_address, timer_address = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    push, _ = subscriptions_app(f"sqlite:///{data_dir / 'push.db'}", RecordingLive())
    timer_settings = TimerSettings(nameservers=[nameserver.address], timer_log_segment_bytes=56 * 1024)
    timer_transport = AsgiTransport(
        in_process_apps, fallback=LeanTransport(connect_timeout=1.0, timeout=5.0, max_connections=16)
    )
    async with contextlib.AsyncExitStack() as stack:
        for broker in broker_configs.values():
            in_process_apps[broker.address] = await stack.enter_async_context(running(broker_app(broker)))
        in_process_apps[push_address] = await stack.enter_async_context(running(push))
        timer = timer_app(timer_settings, transport=timer_transport)
        in_process_apps[timer_address] = await stack.enter_async_context(running(timer))
        gateway = GatewaySettings(
            nameservers=[nameserver.address],
            push_address=push_address,
            timer_address=timer_address,
            auth="required",
            data_dir=data_dir,
        )
        app = create_app(gateway, transport=transport)
        clients = in_process(app)
        client = await anext(clients)
        stack.push_async_callback(clients.aclose)  # type: ignore[attr-defined]
        await _seed(client, headers)
        yield app, client


async def _seed(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    """What the calls of the run find: a topic with a message, groups, and a push subscription."""
    calls = [
        ("PUT", f"/v1/topics/{SEED_NAME}", None),
        ("POST", f"/v1/topics/{SEED_NAME}/messages", {"body": "seed", "keys": ["seed"]}),
        ("PUT", f"/v1/groups/{SEED_NAME}", None),
        ("PUT", f"/v1/producer-groups/{SEED_NAME}", {"checkback_url": PUBLIC_URL}),
        ("PUT", f"/v1/groups/{SEED_NAME}/subscriptions/{SEED_NAME}", {"endpoint_url": PUBLIC_URL}),
    ]
    for method, path, body in calls:
        answer = await client.request(method, path, json=body, headers=headers)
        assert answer.status_code in (200, 201), f"{method} {path}: {answer.text}"


@schemathesis.check
def names_decoded_once(ctx: Any, response: Any, case: Case) -> bool | None:
    """No 2xx for a topic or group in the path that, decoded once (as the server decodes it), breaks the name rules
    (describing a system topic by its exact name excepted: getTopic)."""
    if not 200 <= response.status_code < 300:
        return None
    for param in NAME_PARAMS:
        value = (case.path_parameters or {}).get(param)
        if not isinstance(value, str):
            continue
        name = unquote(value)
        if re.fullmatch(NAME_PATTERN, name) and not (param == "topic" and is_system_topic(name)):
            continue
        described = param == "topic" and case.operation.definition.raw.get("operationId") == "getTopic"
        if described and exact_system_topic(name):
            continue
        raise AssertionError(f"{case.operation.label} answered {response.status_code} for {param} {value!r}")
    return None


CHECKS: list[CheckFunction] = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
    names_decoded_once,
]


def exact_system_topic(name: str) -> bool:
    """One of Petrel's system topics, by its exact name (a group's retry or DLQ topic, or a fixed one)."""
    group = next((name.removeprefix(p) for p in (RETRY_PREFIX, DLQ_PREFIX) if name.startswith(p)), None)
    return name in SYSTEM_TOPICS or (group is not None and re.fullmatch(NAME_PATTERN, group) is not None)


def encoded_name_cases(case: Case) -> list[Case]:
    """The case again with each topic or group of its path spelled each way of ENCODED_NAMES."""
    params = dict(case.path_parameters or {})
    return [
        case.operation.Case(
            path_parameters=params | {param: spelled},
            headers=case.headers,
            query=case.query,
            body=case.body,
            media_type=case.media_type,
        )
        for param in NAME_PARAMS
        if param in params
        for spelled in ENCODED_NAMES
    ]


def own_idempotency_key(case: Case, run_id: str) -> None:
    """A generated Idempotency-Key made this run's own: Redis keeps a key 24 h, and a seeded run draws the same keys."""
    headers: Any = case.headers
    key = headers.get("Idempotency-Key") if isinstance(headers, dict) else None
    if isinstance(key, str) and key:
        headers["Idempotency-Key"] = f"{run_id}{key}"[:MAX_KEY_LENGTH]


def bounded_long_polls(case: Case) -> None:
    """A generated wait (a receive's wait_seconds, a pull's wait_ms) cut to LONG_POLL_MS, if it is a number."""
    body: Any = case.body
    if isinstance(body, dict) and _number(body.get("wait_seconds")):
        body["wait_seconds"] = min(body["wait_seconds"], LONG_POLL_MS / 1000)
    query: Any = case.query
    if isinstance(query, dict) and _number(query.get("wait_ms")):
        query["wait_ms"] = min(query["wait_ms"], LONG_POLL_MS)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def fuzz_operation(operation: Any, mode: GenerationMode, send: Send, run: FuzzRun) -> None:
    """EXAMPLES generated calls of the operation, each answer checked; a failure is recorded, not raised."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    def call(case: Case) -> None:
        bounded_long_polls(case)
        own_idempotency_key(case, run.run_id)
        spelled = (
            encoded_name_cases(case) if mode is GenerationMode.POSITIVE and not run.examples_of[operation.label] else []
        )
        for each in [case, *spelled]:
            run.examples += 1
            run.examples_of[operation.label] += 1
            kwargs = each.as_transport_kwargs(base_url="http://test")
            response = send(kwargs)
            run.statuses[response.status_code] += 1
            each.validate_response(response, checks=CHECKS, transport_kwargs=kwargs)

    try:
        call()
    except Unsatisfiable:  # nothing of the operation can be made invalid (no parameter, no body)
        return
    except (AssertionError, FailureGroup) as exc:  # the next operation runs all the same
        run.failures.append(f"{operation.label} ({mode.value}): {exc}")


def test_every_operation_answers_as_documented(
    nameserver: ServedApp,
    broker_configs: dict[str, BrokerSettings],
    in_process_apps: dict[str, ASGIApp],
    transport: Transport,
    client_headers: dict[str, str],
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    run = FuzzRun()
    gateway = cluster(nameserver, broker_configs, in_process_apps, transport, tmp_path, client_headers)
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(gateway) as (app, client):
        schema = schemathesis.openapi.from_dict(app.openapi())
        send = _sender(portal, client, client_headers)
        for result in schema.get_all_operations():
            operation = result.ok()  # type: ignore[union-attr]
            run.operations += 1
            for mode in MODES:
                fuzz_operation(operation, mode, send, run)
    record_property("fuzz", run.summary())  # tests/conftest.py prints it after the run
    assert run.operations == sum(len(item) for item in app.openapi()["paths"].values()), run.summary()
    assert not run.failures, run.summary() + "\n\n" + "\n\n".join(run.failures)


def _sender(portal: BlockingPortal, client: httpx.AsyncClient, client_headers: dict[str, str]) -> Send:
    """Calls the gateway with a case's request (requests' arguments, as schemathesis serializes it)."""

    def send(kwargs: dict[str, Any]) -> httpx.Response:
        kwargs = dict(kwargs)
        ours = {name.lower() for name in client_headers}  # ours win, whatever the case schemathesis spells them in
        generated = {k: v for k, v in kwargs.get("headers", {}).items() if k.lower() not in ours}
        kwargs["headers"] = {**generated, **client_headers}
        kwargs.pop("cookies", None)  # none are generated: the gateway reads none
        if "data" in kwargs:  # requests' raw body is httpx's `content`
            kwargs["content"] = kwargs.pop("data")
        return portal.call(lambda: client.request(**kwargs))

    return send
