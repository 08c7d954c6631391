"""The broker's half of transactions: half messages never visible, commit once, rollback, renewal, abandon."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote

import httpx
import pytest

from libs.codec import encode_record
from libs.message import MessageRecord, Prop, SysFlag
from libs.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from services.broker.app import create_app
from tests.support.apps import broker_settings, in_process
from tests.support.broker_calls import end, gauge, put_half, topic_records
from tests.support.serving import ServedApp


@pytest.fixture
async def broker(nameserver: ServedApp) -> AsyncIterator[httpx.AsyncClient]:
    async for client in in_process(create_app(broker_settings(nameserver, transaction_check_max=3))):
        await client.put("/internal/topics/orders", json={"read_queues": 2, "write_queues": 2})
        yield client


async def test_a_half_message_is_invisible_until_committed_then_delivered_once(broker: httpx.AsyncClient) -> None:
    stored = await put_half(broker, "TX1")
    assert stored["topic"] == TRANS_HALF_TOPIC
    assert await topic_records(broker, "orders", 1) == [], "a consumer could see a half message"

    first = await end(broker, "TX1", "commit")
    again = await end(broker, "TX1", "commit")
    assert first.status_code == again.status_code == 200
    assert (first.json()["first"], again.json()["first"]) == (True, False)
    (delivered,) = await topic_records(broker, "orders", 1)
    assert (delivered.message_id, delivered.body) == ("TX1", b"pay order 7")
    assert Prop.TRANSACTION_PREPARED not in delivered.properties
    assert first.json()["queue_offset"] == again.json()["queue_offset"] == delivered.queue_offset
    assert (await broker.get("/internal/transactions/TX1")).json()["state"] == "COMMITTED"


async def test_the_committed_copy_keeps_what_the_producer_sent(broker: httpx.AsyncClient) -> None:
    """The half copy and the committed copy are built field by field (not with dataclasses.replace): each field the
    producer set arrives; only the transaction's own properties and flags are gone."""
    sent = MessageRecord(
        topic="orders",
        body=b"\x00binary\xff",
        queue_id=1,
        flag=7,
        properties={
            Prop.UNIQ_KEY: "TX-FIELDS",
            Prop.PRODUCER_GROUP: "shop",
            Prop.TRANSACTION_PREPARED: "true",
            Prop.TAGS: "paid",
            Prop.KEYS: "order-7",
            "region": "eu",
        },
        sysflag=SysFlag.BINARY_BODY,
        born_timestamp=1_700_000_000_123,
        born_host="10.1.2.3:4567",
        reconsume_times=2,
    )
    plain = MessageRecord(topic="orders", body=b"not a transaction", queue_id=0, properties={Prop.UNIQ_KEY: "PLAIN"})
    put = await broker.post(
        "/internal/messages",
        headers={"content-type": "application/octet-stream"},
        content=encode_record(sent) + encode_record(plain),
    )
    assert put.status_code == 200, put.text
    assert [s["topic"] for s in put.json()["stored"]] == [TRANS_HALF_TOPIC, "orders"]
    assert (await end(broker, "TX-FIELDS", "commit")).status_code == 200

    (delivered,) = await topic_records(broker, "orders", 1)
    assert (delivered.body, delivered.flag, delivered.born_timestamp, delivered.born_host) == (
        b"\x00binary\xff",
        7,
        1_700_000_000_123,
        "10.1.2.3:4567",
    )
    assert delivered.reconsume_times == 2
    assert delivered.sysflag == SysFlag.BINARY_BODY | SysFlag.TRANSACTION_COMMIT
    assert delivered.properties == {
        Prop.UNIQ_KEY: "TX-FIELDS",
        Prop.PRODUCER_GROUP: "shop",
        Prop.TAGS: "paid",
        Prop.KEYS: "order-7",
        "region": "eu",
    }
    assert delivered.store_timestamp > 0
    assert delivered.store_host != "0.0.0.0:0"
    (untouched,) = await topic_records(broker, "orders", 0)
    assert (untouched.message_id, untouched.body) == ("PLAIN", b"not a transaction")


async def test_rollback_never_delivers_and_the_other_way_is_a_409_naming_the_first(broker: httpx.AsyncClient) -> None:
    await put_half(broker, "TX2")
    assert (await end(broker, "TX2", "rollback")).json()["outcome"] == "ROLLBACK"
    conflict = await end(broker, "TX2", "commit")
    assert conflict.status_code == 409
    assert conflict.json()["outcome"] == "ROLLBACK"
    assert "ROLLBACK" in conflict.json()["detail"]
    assert await topic_records(broker, "orders", 1) == []


async def test_unknown_transactions_are_404(broker: httpx.AsyncClient) -> None:
    answer = await end(broker, "NOPE", "commit")
    assert answer.status_code == 404
    assert answer.json()["type"].endswith("/transaction-not-found")
    assert (await broker.get("/internal/transactions/NOPE")).status_code == 404


async def test_a_half_message_needs_its_id_and_producer_group(broker: httpx.AsyncClient) -> None:
    bare = encode_record(
        MessageRecord(topic="orders", body=b"x", properties={Prop.UNIQ_KEY: "TX3", Prop.TRANSACTION_PREPARED: "true"})
    )
    answer = await broker.post("/internal/messages", headers={"content-type": "application/octet-stream"}, content=bare)
    assert answer.status_code == 400
    assert "PGROUP" in answer.json()["detail"]


async def test_checks_renew_the_half_copy_until_the_limit_then_abandon_it(broker: httpx.AsyncClient) -> None:
    await put_half(broker, "TX4")
    for count in (1, 2):
        (latest,) = [r for r in await topic_records(broker, TRANS_HALF_TOPIC) if r.message_id == "TX4"][-1:]
        answer = await broker.post(
            "/internal/transactions/TX4/checked", json={"physical_offset": latest.physical_offset}
        )
        assert answer.json()["state"] == "OPEN"
        assert answer.json()["check_count"] == count
    repeated = await broker.post("/internal/transactions/TX4/checked", json={"physical_offset": latest.physical_offset})
    assert repeated.json()["check_count"] == 2, "a repeated scan of the same copy counted a second check"

    (latest,) = [r for r in await topic_records(broker, TRANS_HALF_TOPIC) if r.message_id == "TX4"][-1:]
    answer = await broker.post("/internal/transactions/TX4/checked", json={"physical_offset": latest.physical_offset})
    assert (answer.json()["state"], answer.json()["check_count"]) == ("ABANDONED", 3)
    assert [r.message_id for r in await topic_records(broker, TRANS_CHECK_MAX_TIME_TOPIC)] == ["TX4"]
    listed = (await broker.get("/internal/transactions", params={"state": "ABANDONED"})).json()["transactions"]
    assert [t["message_id"] for t in listed] == ["TX4"]

    assert (await end(broker, "TX4", "commit", by="operator")).status_code == 200
    assert [r.message_id for r in await topic_records(broker, "orders", 1)] == ["TX4"]
    assert (await broker.get("/internal/transactions", params={"state": "ABANDONED"})).json()["transactions"] == []


async def test_outcomes_survive_a_restart_from_the_op_queue(nameserver: ServedApp) -> None:
    settings = broker_settings(nameserver)
    async for client in in_process(create_app(settings)):
        await client.put("/internal/topics/orders", json={"read_queues": 2, "write_queues": 2})
        await put_half(client, "TX5")
        await end(client, "TX5", "commit")
        ops = await topic_records(client, TRANS_OP_HALF_TOPIC)
        assert [r.tag for r in ops] == ["d"]
    async for client in in_process(create_app(settings)):
        assert (await end(client, "TX5", "rollback")).status_code == 409
        assert (await end(client, "TX5", "commit")).json()["first"] is False
        assert len(await topic_records(client, "orders", 1)) == 1


async def test_ends_of_transactions_older_than_those_remembered_are_still_answered_right(
    nameserver: ServedApp,
) -> None:
    settings = broker_settings(nameserver, ended_transactions_kept=2)
    async for client in in_process(create_app(settings)):
        await client.put("/internal/topics/orders", json={"read_queues": 2, "write_queues": 2})
        for index in range(6):
            await put_half(client, f"OLD{index}")
            verb = "commit" if index % 2 == 0 else "rollback"
            assert (await end(client, f"OLD{index}", verb)).json()["first"] is True
        assert await gauge(client, "petrel_broker_ended_transactions_in_memory") == 2
        await assert_old_ends_answered(client)
    async for client in in_process(create_app(settings)):  # restarted: the op queue is read again
        await assert_old_ends_answered(client)


async def assert_old_ends_answered(client: httpx.AsyncClient) -> None:
    assert (await end(client, "OLD0", "commit")).json()["first"] is False
    conflict = await end(client, "OLD0", "rollback")
    assert conflict.status_code == 409, conflict.text
    assert conflict.json()["outcome"] == "COMMIT"
    assert (await end(client, "OLD1", "rollback")).json()["first"] is False
    assert (await end(client, "OLD1", "commit")).status_code == 409, "a rolled-back transaction was committed"
    assert (await client.get("/internal/transactions/OLD1")).json()["state"] == "ROLLED_BACK"
    delivered = [r.message_id or "" for r in await topic_records(client, "orders", 1)]
    assert sorted(delivered) == ["OLD0", "OLD2", "OLD4"], "each commit stored exactly one copy"
    assert [r.tag for r in await topic_records(client, TRANS_OP_HALF_TOPIC)] == ["d"] * 6, "no second op record"


async def test_a_committed_transaction_is_found_and_ends_again_behind_many_copies_of_its_message(
    broker: httpx.AsyncClient,
) -> None:
    # A consumer's retries and dead letters are copies with the same message id, newer than the half.
    await put_half(broker, "TX40")
    assert (await end(broker, "TX40", "commit")).status_code == 200
    retry = "%RETRY%billing"
    await broker.put(f"/internal/topics/{quote(retry)}", json={"read_queues": 1, "write_queues": 1})
    copy = encode_record(MessageRecord(topic=retry, body=b"copy", queue_id=0, properties={Prop.UNIQ_KEY: "TX40"}))
    assert (
        await broker.post("/internal/messages", headers={"content-type": "application/octet-stream"}, content=copy * 40)
    ).status_code == 200

    looked_up = await broker.get("/internal/transactions/TX40")
    again = await end(broker, "TX40", "commit")

    assert looked_up.status_code == 200, looked_up.text
    assert looked_up.json()["state"] == "COMMITTED"
    assert again.status_code == 200, again.text
    assert again.json()["first"] is False
