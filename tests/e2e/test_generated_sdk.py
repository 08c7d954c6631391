"""The SDK proof: a client generated from the committed `openapi/gateway.json` drives a real cluster.

openapi-python-client generates the package into a temporary directory (any warning
fails the test: a warning means a piece of the API is missing from the client), and
the test then talks to a nameserver, a broker and a gateway on loopback through that
package only: topics, sends, lookups, and a consumer group from receive to the DLQ.
The gateway requires API keys (PETREL_AUTH=required); the package's AuthenticatedClient
carries one as the spec's bearer scheme says, and its plain Client gets a 401.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.plan import ProcessSpec
from deploy.supervisor import Supervisor
from tests.support.api_keys import issue_key
from tests.support.serving import free_port

pytestmark = pytest.mark.e2e

SPEC = Path(__file__).resolve().parents[2] / "openapi" / "gateway.json"
PACKAGE = "petrel_client"
CONFIG = {"project_name_override": "petrel-client", "package_name_override": PACKAGE}
# Names a generator makes up when the spec does not name a schema.
MADE_UP_NAME = re.compile(r"^(Body|Response)[A-Z0-9_]|ValidationError$|Type\d+$|\d+$")
# Short levels, so that nothing in this test waits on a real retry delay.
DELAY_LEVELS = " ".join(["100ms"] * 18)


def generate_client(directory: Path) -> str:
    """Generate the client package into `directory`; answer the generator's output."""
    config = directory / "config.json"
    config.write_text(json.dumps(CONFIG))
    argv = [sys.executable, "-m", "openapi_python_client", "generate", "--path", str(SPEC)]
    argv += ["--config", str(config), "--meta", "none", "--output-path", str(directory / PACKAGE)]
    # The generator formats its output with ruff, found on PATH: the one next to this Python.
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [*argv, "--fail-on-warning"], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"openapi-python-client failed on openapi/gateway.json:\n{output}"
    assert "warning" not in output.lower(), f"openapi-python-client warned on openapi/gateway.json:\n{output}"
    return output


class Sdk:
    """The generated package, reached by the names a user would import."""

    def __init__(self, client: Any) -> None:
        self.models = importlib.import_module(f"{PACKAGE}.models")
        self.client = client

    def call(self, tag: str, operation: str, status: int, **arguments: Any) -> Any:
        """Call `api/<tag>/<operation>` and answer the parsed body, which must come with `status`."""
        module = importlib.import_module(f"{PACKAGE}.api.{tag}.{operation}")
        response = module.sync_detailed(client=self.client, **arguments)
        assert response.status_code == status, f"{operation}: {response.status_code} {response.content!r}"
        return response.parsed


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("sdk")
    generate_client(directory)
    sys.path.insert(0, str(directory))
    try:
        yield directory / PACKAGE
    finally:
        sys.path.remove(str(directory))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


@dataclass(frozen=True)
class Gateway:
    url: str
    key: str
    """an API key that may do everything: admin, pub, sub"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One cluster for the module, API keys required: each test uses its own topics and group."""
    data_dir = tmp_path_factory.mktemp("cluster") / "data"
    ports = {name: free_port() for name in ("nameserver", "broker", "gateway")}
    shared = {
        "PETREL_DATA_DIR": str(data_dir),
        "PETREL_NAMESERVERS": f"127.0.0.1:{ports['nameserver']}",
        "PETREL_BROKER_SEGMENT_SIZE": str(8 * 1024 * 1024),
        "PETREL_BROKER_INDEX_SLOT_COUNT": "65536",
        "PETREL_BROKER_INDEX_MAX_ENTRIES": "100000",
        "PETREL_DELAY_LEVELS": DELAY_LEVELS,
        "PETREL_AUTH": "required",
    }
    specs = [
        ProcessSpec(
            "nameserver",
            "services.nameserver",
            ports["nameserver"],
            shared | {"PETREL_NAMESERVER_PORT": str(ports["nameserver"])},
        ),
        ProcessSpec(
            "broker-a", "services.broker", ports["broker"], shared | {"PETREL_BROKER_PORT": str(ports["broker"])}
        ),
        ProcessSpec("gateway", "gateway", ports["gateway"], shared | {"PETREL_GATEWAY_PORT": str(ports["gateway"])}),
    ]
    supervisor = Supervisor(data_dir, say=lambda _: None)
    try:
        for spec in specs:
            supervisor.start(spec)
        yield Gateway(specs[-1].url, issue_key(data_dir, "admin", "pub", "sub", name="sdk"))
    finally:
        supervisor.stop_all()


@pytest.fixture
def sdk(generated: Path, gateway: Gateway) -> Iterator[Sdk]:
    package = importlib.import_module(PACKAGE)
    with package.AuthenticatedClient(base_url=gateway.url, token=gateway.key, timeout=15.0) as client:
        yield Sdk(client)


def test_a_call_without_the_key_is_a_401_problem(generated: Path, gateway: Gateway) -> None:
    package = importlib.import_module(PACKAGE)
    models = importlib.import_module(f"{PACKAGE}.models")
    send = importlib.import_module(f"{PACKAGE}.api.messages.send_message")
    body = models.SendMessage(body="no key")
    with package.Client(base_url=gateway.url, timeout=15.0, raise_on_unexpected_status=True) as anonymous:
        refused = send.sync_detailed(client=anonymous, topic="sdk-anonymous", body=body)
    assert refused.status_code == 401, refused.content
    assert refused.headers["www-authenticate"] == 'Bearer realm="petrel"'
    problem = refused.parsed  # a declared answer: the spec's Problem, not the SDK's UnexpectedStatus
    assert isinstance(problem, models.Problem), problem
    assert problem.type_ == "https://petrel.dev/problems/unauthorized"
    assert "Authorization: Bearer" in problem.detail

    wrong = package.AuthenticatedClient(base_url=gateway.url, token=gateway.key[:-4] + "AAAA", timeout=15.0)
    with wrong:
        assert send.sync_detailed(client=wrong, topic="sdk-anonymous", body=body).status_code == 401


def test_generated_names_are_the_specs_own(generated: Path) -> None:
    models = importlib.import_module(f"{PACKAGE}.models")
    made_up = [name for name in models.__all__ if MADE_UP_NAME.search(name)]
    assert made_up == [], f"the generated client has classes the spec did not name: {made_up}"
    spec = json.loads(SPEC.read_text())
    operation_ids = {op["operationId"] for item in spec["paths"].values() for op in item.values()}
    modules = {p.stem for p in (generated / "api").glob("*/*.py") if p.stem != "__init__"}
    assert modules == {re.sub(r"(?<!^)(?=[A-Z])", "_", o).lower() for o in operation_ids}


def test_topics_and_messages_through_the_generated_client(sdk: Sdk) -> None:
    m = sdk.models
    bare = sdk.call("topics", "put_topic", 201, topic="sdk-bare")
    assert bare.queues == 8
    topic = sdk.call("topics", "put_topic", 201, topic="sdk-orders", body=m.TopicSpec(queues=1))
    assert (topic.topic, topic.queues, topic.message_type) == ("sdk-orders", 1, m.MessageType.NORMAL)

    properties = m.Properties.from_dict({"amount": "42"})
    sent = sdk.call(
        "messages",
        "send_message",
        201,
        topic="sdk-orders",
        body=m.SendMessage(body="order 1 paid", tag="paid", keys=["order-1"], properties=properties),
    )
    assert (sent.topic, sent.queue_id, sent.queue_offset) == ("sdk-orders", 0, 0)

    found = sdk.call("messages", "get_message", 200, message_id=sent.message_id)
    assert (found.body, found.tag, found.keys) == ("order 1 paid", "paid", ["order-1"])
    assert found.properties.to_dict() == {"amount": "42"}

    missing = sdk.call("messages", "get_message", 404, message_id="0" * 32)
    assert isinstance(missing, m.Problem)
    assert missing.type_ == "https://petrel.dev/problems/message-not-found"


def receive(sdk: Sdk, group: str, topic: str, count: int) -> list[Any]:
    """Receive until `count` messages came (a receive answers what is there once one is)."""
    received: list[Any] = []
    for _ in range(10):
        body = sdk.models.ReceiveRequest(max_messages=32, wait_seconds=2, invisible_seconds=30)
        result = sdk.call("consume", "receive_messages", 200, group=group, topic=topic, body=body)
        received += result.messages
        if len(received) >= count:
            return received
    raise AssertionError(f"received {len(received)} of {count} messages from {topic} in group {group}")


def test_a_consumer_group_through_the_generated_client(sdk: Sdk) -> None:
    m = sdk.models
    sdk.call("topics", "put_topic", 201, topic="sdk-jobs", body=m.TopicSpec(queues=1))
    sent = [
        sdk.call("messages", "send_message", 201, topic="sdk-jobs", body=m.SendMessage(body=text)).message_id
        for text in ("done", "fails")
    ]
    group = sdk.call("groups", "put_group", 201, group="sdk-workers", body=m.GroupUpdate(max_retries=1))
    assert (group.name, group.max_retries) == ("sdk-workers", 1)

    first = {r.body: r for r in receive(sdk, "sdk-workers", "sdk-jobs", 2)}
    assert [first["done"].message_id, first["fails"].message_id] == sent
    assert first["fails"].delivery_attempt == 1

    acked = sdk.call(
        "consume",
        "ack_messages",
        200,
        group="sdk-workers",
        body=m.AckRequest(receipt_handles=[first["done"].receipt_handle]),
    )
    assert [r.ok for r in acked.results] == [True]
    again = sdk.call(
        "consume",
        "ack_messages",
        200,
        group="sdk-workers",
        body=m.AckRequest(receipt_handles=[first["done"].receipt_handle]),
    )
    assert not again.results[0].ok
    assert again.results[0].error.status == 409, again.results[0].error

    handle = first["fails"].receipt_handle
    for attempt in (1, 2):
        nack = m.NackRequest(receipt_handles=[handle], delay_ms=0, reason=f"attempt {attempt} failed")
        nacked = sdk.call("consume", "nack_messages", 200, group="sdk-workers", body=nack)
        assert [r.ok for r in nacked.results] == [True], nacked.results[0].error
        if attempt == 1:
            (retry,) = receive(sdk, "sdk-workers", "sdk-jobs", 1)
            assert (retry.message_id, retry.delivery_attempt, retry.topic) == (sent[1], 2, "sdk-jobs")
            handle = retry.receipt_handle

    dead = sdk.call("groups", "peek_dead_letters", 200, group="sdk-workers")
    assert [d.message_id for d in dead.messages] == [sent[1]]
    (letter,) = dead.messages
    assert (letter.original_topic, letter.attempts, letter.body) == ("sdk-jobs", 2, "fails")
    assert "attempt 2 failed" in letter.reason


def test_a_transaction_through_the_generated_client(sdk: Sdk) -> None:
    m = sdk.models
    update = m.ProducerGroupUpdate(checkback_url="http://127.0.0.1:9/checkback")
    group = sdk.call("transactions", "put_producer_group", 201, group="sdk-shop", body=update)
    assert group.signing_secret.startswith("whsec_")
    shown = sdk.call("transactions", "get_producer_group", 200, group="sdk-shop")
    assert (shown.name, shown.checkback_url) == ("sdk-shop", "http://127.0.0.1:9/checkback")

    sdk.call("topics", "put_topic", 201, topic="sdk-payments", body=m.TopicSpec(queues=1))
    half = m.SendTransaction(body="charge order 9", producer_group="sdk-shop", check_immunity_seconds=60)
    sent = sdk.call("transactions", "send_transaction", 201, topic="sdk-payments", body=half)
    assert sent.transaction_id.startswith(f"{sent.broker}:{sent.message_id}")
    state = sdk.call("transactions", "get_transaction", 200, transaction_id=sent.transaction_id)
    assert (state.state, state.producer_group) == (m.TransactionState.OPEN, "sdk-shop")

    committed = sdk.call("transactions", "commit_transaction", 200, transaction_id=sent.transaction_id)
    assert (committed.outcome, committed.first, committed.queue_offset) == (m.TransactionOutcome.COMMIT, True, 0)
    operator = m.EndTransaction(by=m.TransactionEndedBy.OPERATOR)
    refused = sdk.call("transactions", "rollback_transaction", 409, transaction_id=sent.transaction_id, body=operator)
    assert refused.type_ == "https://petrel.dev/problems/transaction-already-ended"
    found = sdk.call("messages", "get_message", 200, message_id=sent.message_id)
    assert (found.topic, found.body) == ("sdk-payments", "charge order 9")

    abandoned = sdk.call("transactions", "list_transactions", 200, state=m.TransactionFilter.ABANDONED)
    assert abandoned.transactions == []
