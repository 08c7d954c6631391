"""`/v1` transactions: producer groups, half messages, commit and rollback, lookups, abandoned transactions."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.app import create_app
from gateway.settings import GatewaySettings
from libs.message import Prop
from libs.names import TRANS_HALF_TOPIC
from libs.producer_groups import ProducerGroupStore, open_metadata_engine
from tests.support.apps import in_process
from tests.support.databases import postgres_schema
from tests.support.gateway_calls import problem_type, received, register_silent_broker
from tests.support.gateway_transactions import begin, end, half_copies, pull, register, visible
from tests.support.serving import ServedApp

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
UNKNOWN_ID = "0" * 32


@pytest.fixture
def broker_overrides() -> dict[str, Any]:
    """Brokers that abandon a transaction at its first check, so abandoning one takes one call."""
    return {"transaction_check_max": 1}


# ---- producer groups -----------------------------------------------------------------------------


async def test_put_registers_a_group_with_a_generated_secret_shown_once(gateway: httpx.AsyncClient) -> None:
    created = await register(gateway, checkback_url="https://127.0.0.1/tx")
    assert created.status_code == 201, created.text
    group = created.json()
    assert (group["name"], group["checkback_url"]) == ("shop", "https://127.0.0.1/tx")
    assert group["signing_secret"].startswith("whsec_")
    assert isinstance(group["created_at"], int)

    shown = await gateway.get("/v1/producer-groups/shop")
    assert shown.status_code == 200, shown.text
    assert shown.json() == {
        "name": "shop",
        "checkback_url": "https://127.0.0.1/tx",
        "created_at": group["created_at"],
    }


async def test_put_again_updates_the_url_and_keeps_the_secret_without_showing_it(gateway: httpx.AsyncClient) -> None:
    first = (await register(gateway)).json()
    updated = await register(gateway, checkback_url="http://127.0.0.1:8000/tx")
    assert updated.status_code == 200, updated.text
    assert updated.json() == first | {
        "checkback_url": "http://127.0.0.1:8000/tx",
        "signing_secret": None,
        "secret_overlap_until": None,
    }, "a repeated PUT showed the signing secret again"

    given = await register(gateway, signing_secret=SECRET)
    assert (given.status_code, given.json()["signing_secret"]) == (200, SECRET), "the secret this PUT set is echoed"


async def test_rotate_secret_shows_a_new_secret_once_and_the_old_one_signs_meanwhile(
    gateway: httpx.AsyncClient, tmp_path: Path
) -> None:
    await register(gateway, signing_secret=SECRET)
    rotated = await gateway.post("/v1/producer-groups/shop:rotate-secret", json={"overlap_seconds": 3600})
    assert rotated.status_code == 200, rotated.text
    answer = rotated.json()
    assert answer["signing_secret"].startswith("whsec_")
    assert answer["signing_secret"] != SECRET
    assert answer["secret_overlap_until"] > 0
    engine = open_metadata_engine(f"sqlite:///{tmp_path / 'data' / 'metadata.db'}")
    try:
        stored = ProducerGroupStore(engine).get("shop")  # what txcheck reads
    finally:
        engine.dispose()
    assert stored.signing_secrets(answer["secret_overlap_until"] - 1) == [answer["signing_secret"], SECRET]
    assert "signing_secret" not in (await gateway.get("/v1/producer-groups/shop")).json()

    at_once = await gateway.post("/v1/producer-groups/shop:rotate-secret", json={"overlap_seconds": 0})
    assert at_once.json()["secret_overlap_until"] is None
    assert at_once.json()["signing_secret"] not in (answer["signing_secret"], SECRET)
    unknown = await gateway.post("/v1/producer-groups/nobody:rotate-secret")
    assert (unknown.status_code, problem_type(unknown)) == (404, "producer-group-not-found")


async def test_list_shows_every_group_by_name_without_secrets(gateway: httpx.AsyncClient) -> None:
    for name in ("zeta", "alpha"):
        assert (await register(gateway, name)).status_code == 201
    listed = await gateway.get("/v1/producer-groups")
    assert listed.status_code == 200, listed.text
    groups = listed.json()["producer_groups"]
    assert [g["name"] for g in groups] == ["alpha", "zeta"]
    assert all("signing_secret" not in g for g in groups)


@pytest.mark.parametrize(
    ("fields", "status", "kind", "detail"),
    [
        ({"checkback_url": "ftp://shop.example/"}, 400, "invalid-request", "must be an http or https URL with a host"),
        ({"checkback_url": "shop.example/tx"}, 400, "invalid-request", "must be an http or https URL with a host"),
        ({"checkback_url": "http://"}, 400, "invalid-request", "must be an http or https URL with a host"),
        ({"signing_secret": "hunter2"}, 400, "invalid-request", "signing_secret must start with 'whsec_'"),
        ({"signing_secret": "whsec_c2hvcnQ="}, 400, "invalid-request", "signing_secret holds 5 bytes"),
        ({"checkback_url": None}, 400, "invalid-request", "its checkback_url is needed"),
        ({"retries": 3}, 422, "validation-failed", "body.retries"),
    ],
)
async def test_a_bad_registration_is_refused(
    gateway: httpx.AsyncClient, fields: dict[str, Any], status: int, kind: str, detail: str
) -> None:
    body = {"checkback_url": "http://127.0.0.1:9/tx"} | fields
    answer = await gateway.put("/v1/producer-groups/shop", json={k: v for k, v in body.items() if v is not None})
    assert answer.status_code == status, answer.text
    assert problem_type(answer) == kind
    assert detail in answer.json()["detail"]
    assert (await gateway.get("/v1/producer-groups/shop")).status_code == 404


@pytest.mark.parametrize(
    ("url", "detail"),
    [
        ("http://10.0.0.5:8000/tx", "10.0.0.5 is not a public internet address: Private-Use (10.0.0.0/8, RFC 1918)"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is not a public internet address: Link Local"),
        ("http://100.100.100.200/latest/meta-data/", "100.100.100.200 is not a public internet address: Shared"),
        ("http://192.0.0.192/opc/v2/instance/", "192.0.0.192 is not a public internet address: IETF Protocol"),
        ("http://[fec0::1]/tx", "fec0::1 is not a public internet address: Reserved by IETF (site-local"),
        ("http://[2002:a00:1::1]/tx", "2002:a00:1::1 is not a public internet address: it carries 10.0.0.1 (6to4"),
        ("http://[64:ff9b::a00:1]/tx", "64:ff9b::a00:1 is not a public internet address: it carries 10.0.0.1 (NAT64"),
        ("http://[::ffff:10.1.2.3]/tx", "::ffff:10.1.2.3 is not a public internet address: IPv4-mapped Address"),
        ("http://0.0.0.0:9/tx", '0.0.0.0 is not a public internet address: "This host on this network"'),
        ("http://2852039166/tx", "2852039166 (169.254.169.254) is not a public internet address: Link Local"),
        ("http://no-such-host.invalid/tx", "no-such-host.invalid does not resolve, or not only to public internet"),
    ],
)
async def test_a_checkback_url_off_the_public_internet_is_refused(
    gateway: httpx.AsyncClient, url: str, detail: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = await register(gateway, checkback_url=url)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert problem_type(answer) == "invalid-request"
    assert answer.json()["detail"].startswith(detail), answer.json()["detail"]
    assert (await gateway.get("/v1/producer-groups/shop")).status_code == 404


async def test_a_name_that_resolves_inside_is_refused_without_what_it_resolves_to(
    nameserver: ServedApp, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PETREL_PUSH_ALLOWED_NETWORKS", "")  # not even loopback
    settings = GatewaySettings(nameservers=[nameserver.address])
    async for gateway in in_process(create_app(settings)):
        with caplog.at_level(logging.WARNING, logger="libs.egress"):
            answer = await register(gateway, checkback_url="http://localhost:9/tx")
        assert answer.status_code == 400, answer.text
        assert answer.json()["detail"] == (
            "localhost does not resolve, or not only to public internet addresses; "
            "an operator allows other networks with PETREL_PUSH_ALLOWED_NETWORKS"
        )
        assert "127.0.0.1" in caplog.text, "the log tells the operator what the name resolved to"


async def test_an_allowlisted_private_network_is_accepted(
    nameserver: ServedApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PETREL_PUSH_ALLOWED_NETWORKS", "10.0.0.0/8, fd00:ec2::254/128")
    settings = GatewaySettings(nameservers=[nameserver.address])
    async for gateway in in_process(create_app(settings)):
        assert (await register(gateway, checkback_url="http://10.0.0.5:8000/tx")).status_code == 201
        assert (await register(gateway, checkback_url="http://[fd00:ec2::254]/tx")).status_code == 200
        loopback = await register(gateway, checkback_url="http://127.0.0.1:9/tx")
        assert loopback.status_code == 400, "an allowlist set replaces the loopback default"
        assert "127.0.0.1 is not a public internet address: Loopback" in loopback.json()["detail"]


async def test_producer_groups_go_to_the_database_petrel_database_url_names(
    nameserver: ServedApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where txcheck, with its own engine, reads them: here the real PostgreSQL."""
    with postgres_schema() as url:
        monkeypatch.setenv("PETREL_DATABASE_URL", url)
        settings = GatewaySettings(nameservers=[nameserver.address])
        assert settings.metadata_url == url
        async for gateway in in_process(create_app(settings)):
            created = (await register(gateway)).json()
        engine = open_metadata_engine(url)
        try:
            stored = ProducerGroupStore(engine).get("shop")
        finally:
            engine.dispose()
    assert (stored.checkback_url, stored.signing_secret) == (created["checkback_url"], created["signing_secret"])


async def test_unknown_and_badly_named_producer_groups(gateway: httpx.AsyncClient) -> None:
    missing = await gateway.get("/v1/producer-groups/nobody")
    assert missing.status_code == 404
    assert problem_type(missing) == "producer-group-not-found"
    bad = await gateway.put("/v1/producer-groups/no%20spaces", json={"checkback_url": "http://a.example/"})
    assert bad.status_code == 400
    assert problem_type(bad) == "invalid-request"


# ---- half messages --------------------------------------------------------------------------------


async def test_a_half_message_is_stored_unseen_with_its_producer_group(
    gateway: httpx.AsyncClient, brokers: dict[str, ServedApp]
) -> None:
    sent = await begin(gateway, tag="paid", keys=["order-7"], properties={"amount": "42"}, check_immunity_seconds=30)

    assert (sent["topic"], sent["broker"] in brokers) == ("orders", True)
    assert await visible(gateway, "orders") == [], "a consumer could pull a half message"
    (copy,) = await half_copies(brokers[sent["broker"]])
    assert sent["transaction_id"] == f"{sent['broker']}:{sent['message_id']}.{copy.physical_offset:x}"
    assert copy.message_id == sent["message_id"]
    assert copy.properties[Prop.PRODUCER_GROUP] == "shop"
    assert copy.properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "30"
    assert copy.properties[Prop.REAL_TOPIC] == "orders"

    state = await gateway.get(f"/v1/transactions/{sent['transaction_id']}")
    assert state.status_code == 200, state.text
    # The broker times a transaction from just before its half copy is stored: a millisecond may separate them.
    shown = state.json()
    assert 0 <= sent["stored_at"] - shown["stored_at"] <= 1000
    assert shown | {"stored_at": sent["stored_at"]} == {
        "transaction_id": sent["transaction_id"],
        "message_id": sent["message_id"],
        "state": "OPEN",
        "topic": "orders",
        "producer_group": "shop",
        "check_count": 0,
        "stored_at": sent["stored_at"],
        "broker": sent["broker"],
    }


async def test_an_unknown_producer_group_is_404_and_nothing_is_stored(
    gateway: httpx.AsyncClient, brokers: dict[str, ServedApp]
) -> None:
    answer = await gateway.post("/v1/topics/orders/transactions", json={"body": "x", "producer_group": "nobody"})
    assert answer.status_code == 404, answer.text
    assert problem_type(answer) == "producer-group-not-found"
    for broker in brokers.values():
        assert await half_copies(broker) == []


@pytest.mark.parametrize(
    ("fields", "status", "kind", "detail"),
    [
        ({"delay_ms": 1000}, 400, "invalid-message", "a transactional message cannot be delayed (delay_ms)"),
        (
            {"delay_level": 3, "deliver_at": 1},
            400,
            "invalid-message",
            "a transactional message cannot be delayed (delay_level, deliver_at)",
        ),
        ({"properties": {Prop.PRODUCER_GROUP: "other"}}, 400, "invalid-message", "reserved for Petrel"),
        (
            {"properties": {"CHECK_IMMUNITY_TIME_IN_SECONDS": "99999999"}},
            400,
            "invalid-message",
            "property name(s) CHECK_IMMUNITY_TIME_IN_SECONDS are reserved for Petrel",
        ),
        ({"producer_group": "no spaces"}, 400, "invalid-request", "group name 'no spaces' is invalid"),
        ({"check_immunity_seconds": 86_401}, 422, "validation-failed", "body.check_immunity_seconds"),
        ({"producer_group": None}, 422, "validation-failed", "body.producer_group"),
        ({"body": None}, 400, "invalid-message", "give exactly one of body (text) or body_base64"),
    ],
)
async def test_a_bad_half_message_is_refused(
    gateway: httpx.AsyncClient, fields: dict[str, Any], status: int, kind: str, detail: str
) -> None:
    assert (await register(gateway)).status_code == 201
    body = {"body": "x", "producer_group": "shop"} | fields
    answer = await gateway.post("/v1/topics/orders/transactions", json={k: v for k, v in body.items() if v is not None})
    assert answer.status_code == status, answer.text
    assert problem_type(answer) == kind
    assert detail in answer.json()["detail"]


async def test_a_half_message_to_a_system_topic_is_refused(gateway: httpx.AsyncClient) -> None:
    assert (await register(gateway)).status_code == 201
    answer = await gateway.post(
        f"/v1/topics/{TRANS_HALF_TOPIC}/transactions", json={"body": "x", "producer_group": "shop"}
    )
    assert answer.status_code == 400, answer.text
    assert problem_type(answer) == "reserved-topic-name"


async def test_a_silent_broker_is_avoided(gateway: httpx.AsyncClient, nameserver: ServedApp) -> None:
    """A broker the nameserver still lists but that answers nothing: the half goes to a live one."""
    await gateway.put("/v1/topics/orders")
    await register_silent_broker(nameserver, "orders")
    brokers = {(await begin(gateway))["broker"] for _ in range(6)}
    assert brokers <= {"broker-a", "broker-b"}


# ---- commit and rollback --------------------------------------------------------------------------


async def test_commit_delivers_the_message_once_with_its_id(gateway: httpx.AsyncClient) -> None:
    sent = await begin(gateway, tag="paid", keys=["order-7"], properties={"amount": "42"}, check_immunity_seconds=5)
    transaction_id = sent["transaction_id"]

    first = await end(gateway, transaction_id, "commit")
    assert first.status_code == 200, first.text
    committed = first.json()
    assert committed["transaction_id"] == transaction_id
    assert (committed["message_id"], committed["outcome"], committed["first"]) == (sent["message_id"], "COMMIT", True)
    assert committed["topic"] == "orders"
    assert isinstance(committed["queue_offset"], int)

    (message,) = await pull(gateway, "orders", sent["broker"], committed["queue_id"])
    assert (message["message_id"], message["body"], message["tag"]) == (sent["message_id"], "pay order 7", "paid")
    assert (message["keys"], message["properties"]) == (["order-7"], {"amount": "42"})
    assert message["queue_offset"] == committed["queue_offset"]

    again = await end(gateway, transaction_id, "commit")
    assert again.status_code == 200, again.text
    assert again.json() == committed | {"first": False}
    assert await visible(gateway, "orders") == [sent["message_id"]]

    state = (await gateway.get(f"/v1/transactions/{transaction_id}")).json()["state"]
    assert state == "COMMITTED"


async def test_rollback_delivers_nothing_and_a_commit_after_it_is_409(gateway: httpx.AsyncClient) -> None:
    sent = await begin(gateway)
    transaction_id = sent["transaction_id"]

    first = await end(gateway, transaction_id, "rollback")
    assert first.status_code == 200, first.text
    assert (first.json()["outcome"], first.json()["first"], first.json()["queue_offset"]) == ("ROLLBACK", True, None)
    assert (await end(gateway, transaction_id, "rollback")).json()["first"] is False

    late = await end(gateway, transaction_id, "commit")
    assert late.status_code == 409, late.text
    assert problem_type(late) == "transaction-already-ended"
    assert late.json()["outcome"] == "ROLLBACK"
    assert await visible(gateway, "orders") == []
    assert (await gateway.get(f"/v1/transactions/{transaction_id}")).json()["state"] == "ROLLED_BACK"


async def test_concurrent_ends_share_broker_calls_and_commit_once(gateway: httpx.AsyncClient) -> None:
    sent = [await begin(gateway) for _ in range(3)]
    opened = [s["transaction_id"] for s in sent]
    asked = [(tid, "commit") for tid in opened for _ in range(4)] + [(opened[0], "rollback")]

    answers = await asyncio.gather(*(end(gateway, tid, verb) for tid, verb in asked))

    commits, refused = answers[:-1], answers[-1]
    assert [a.status_code for a in commits] == [200] * 12, [a.text for a in commits if a.status_code != 200]
    assert sum(a.json()["first"] for a in commits) == 3, "a transaction was committed more than once"
    assert refused.status_code == 409, "the rollback after the commit was not refused"
    assert refused.json()["outcome"] == "COMMIT"
    assert sorted(await visible(gateway, "orders")) == sorted(s["message_id"] for s in sent)


async def test_a_rollback_after_a_commit_is_409_naming_the_commit(gateway: httpx.AsyncClient) -> None:
    transaction_id = (await begin(gateway))["transaction_id"]
    assert (await end(gateway, transaction_id, "commit")).status_code == 200
    late = await end(gateway, transaction_id, "rollback")
    assert late.status_code == 409, late.text
    assert (problem_type(late), late.json()["outcome"]) == ("transaction-already-ended", "COMMIT")


async def test_a_consumer_group_receives_the_message_only_once_committed(gateway: httpx.AsyncClient) -> None:
    assert (await gateway.put("/v1/groups/billing")).status_code == 201
    sent = await begin(gateway)
    assert await received(gateway, "billing", "orders") == []
    assert (await end(gateway, sent["transaction_id"], "commit")).status_code == 200
    assert [m["message_id"] for m in await received(gateway, "billing", "orders")] == [sent["message_id"]]


@pytest.mark.parametrize(
    "transaction_id",
    [
        "nonsense",
        f":{UNKNOWN_ID}",
        "broker-a:not-hex",
        f"broker-z:{UNKNOWN_ID}",
        f"broker-a:{UNKNOWN_ID}",
        f"broker-a:{UNKNOWN_ID}.0",
        f"broker-a:{UNKNOWN_ID}.",
        f"broker-a:{UNKNOWN_ID}.zz",
        f"broker-a:{UNKNOWN_ID}.-1",
        f"broker-a:{UNKNOWN_ID}.{'f' * 17}",
        f"broker-a:{UNKNOWN_ID}.1.2",
    ],
)
async def test_unknown_transactions_are_404(gateway: httpx.AsyncClient, transaction_id: str) -> None:
    for answer in (
        await end(gateway, transaction_id, "commit"),
        await end(gateway, transaction_id, "rollback"),
        await gateway.get(f"/v1/transactions/{transaction_id}"),
    ):
        assert answer.status_code == 404, answer.text
        assert problem_type(answer) == "transaction-not-found"


async def test_who_ends_it_is_producer_or_operator(gateway: httpx.AsyncClient) -> None:
    transaction_id = (await begin(gateway))["transaction_id"]
    refused = await end(gateway, transaction_id, "commit", by="checkback")
    assert refused.status_code == 422, refused.text
    assert problem_type(refused) == "validation-failed"
    operator = await end(gateway, transaction_id, "commit", by="operator")
    assert operator.status_code == 200, operator.text
    assert operator.json()["first"] is True


# ---- lifecycle events -----------------------------------------------------------------------------


async def test_a_half_message_is_a_transaction_half_event(
    nameserver: ServedApp, brokers: dict[str, ServedApp], tmp_path: Path
) -> None:
    settings = GatewaySettings(nameservers=[nameserver.address], data_dir=tmp_path / "gateway")
    async for gateway in in_process(create_app(settings)):
        sent = await begin(gateway)
    lines = [
        json.loads(line)
        for path in (settings.data_dir / "export" / "events").rglob("gateway-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    (event,) = [e for e in lines if e["event"] == "transaction_half"]
    assert {k: event[k] for k in ("message_id", "topic", "transaction_id", "producer_group")} == {
        "message_id": sent["message_id"],
        "topic": "orders",
        "transaction_id": sent["transaction_id"],
        "producer_group": "shop",
    }
