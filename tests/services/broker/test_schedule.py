"""The broker's half of scheduled delivery: store until due, deliver by offset (the timer drives it)."""

import time
from collections.abc import AsyncIterator

import httpx
import pytest

from libs.broker_api.frames import read_units
from libs.codec import encode_record, iter_records
from libs.message import MessageRecord, Prop
from libs.names import SCHEDULE_TOPIC, TIMER_TOPIC
from libs.store.consume_queue import UNIT
from services.broker.app import create_app
from tests.support.apps import broker_settings, in_process
from tests.support.serving import ServedApp


@pytest.fixture
async def broker(nameserver: ServedApp) -> AsyncIterator[httpx.AsyncClient]:
    async for client in in_process(create_app(broker_settings(nameserver))):
        await client.put("/internal/topics/orders", json={"read_queues": 4, "write_queues": 4})
        yield client


def record(queue_id: int, **properties: str) -> bytes:
    props = {Prop.UNIQ_KEY: "01A1FCE7BB289829373C3E9B000000AA", Prop.TAGS: "paid", "amount": "42"} | properties
    return encode_record(MessageRecord(topic="orders", body=b"later", queue_id=queue_id, properties=props))


async def units(broker: httpx.AsyncClient, topic: str, queue: int) -> list[tuple[int, int, int]]:
    answer = await broker.get(f"/internal/topics/{topic}/queues/{queue}/units", params={"offset": 0})
    assert answer.status_code == 200, answer.text
    return list(UNIT.iter_unpack(answer.content))


async def pulled(broker: httpx.AsyncClient, topic: str, queue: int) -> list[MessageRecord]:
    answer = await broker.get(f"/internal/topics/{topic}/queues/{queue}/messages", params={"offset": 0})
    return list(iter_records(answer.content))


async def test_system_topics_exist_from_the_start(broker: httpx.AsyncClient) -> None:
    topics = {t["topic"]: t["write_queues"] for t in (await broker.get("/internal/topics")).json()["topics"]}
    assert topics[SCHEDULE_TOPIC] == 18
    assert topics[TIMER_TOPIC] == 1


async def test_a_level_message_waits_in_its_delay_queue_until_delivered(broker: httpx.AsyncClient) -> None:
    before = int(time.time() * 1000)
    stored = (
        await broker.post(
            "/internal/messages",
            headers={"content-type": "application/octet-stream"},
            content=record(2, **{Prop.DELAY_LEVEL: "3"}),
        )
    ).json()

    assert stored["stored"][0]["topic"] == SCHEDULE_TOPIC
    assert stored["stored"][0]["queue_id"] == 2  # level 3 -> queue 2
    assert await pulled(broker, "orders", 2) == [], "a consumer saw a message before it was due"
    ((physical, _, due),) = await units(broker, SCHEDULE_TOPIC, 2)
    assert before + 10_000 <= due <= int(time.time() * 1000) + 10_000  # level 3 is 10 s

    answer = await broker.post("/internal/timers/deliveries", json={"physical_offsets": [physical]})

    (result,) = answer.json()["results"]
    assert (result["status"], result["topic"], result["queue_id"], result["queue_offset"]) == (
        "delivered",
        "orders",
        2,
        0,
    )
    (message,) = await pulled(broker, "orders", 2)
    assert message.message_id == "01A1FCE7BB289829373C3E9B000000AA"
    assert (message.body, message.tag, message.user_properties) == (b"later", "paid", {"amount": "42"})
    assert Prop.REAL_TOPIC not in message.properties
    assert Prop.TIMER_DELIVER_MS not in message.properties


async def test_an_exact_time_message_waits_in_the_timer_topic(broker: httpx.AsyncClient) -> None:
    due = int(time.time() * 1000) + 3_600_000
    await broker.post(
        "/internal/messages",
        headers={"content-type": "application/octet-stream"},
        content=record(1, **{Prop.TIMER_DELIVER_MS: str(due)}),
    )

    ((_, _, code),) = await units(broker, TIMER_TOPIC, 0)
    assert code == due
    assert await pulled(broker, "orders", 1) == []


async def test_a_level_outside_the_table_is_refused(broker: httpx.AsyncClient) -> None:
    answer = await broker.post(
        "/internal/messages",
        headers={"content-type": "application/octet-stream"},
        content=record(0, **{Prop.DELAY_LEVEL: "19"}),
    )
    assert answer.status_code == 400
    assert answer.json()["detail"] == "delay level '19' is not between 1 and 18"


async def test_delivering_what_is_not_scheduled_fails_clearly(broker: httpx.AsyncClient) -> None:
    stored = (
        await broker.post("/internal/messages", headers={"content-type": "application/octet-stream"}, content=record(0))
    ).json()["stored"][0]
    answer = await broker.post("/internal/timers/deliveries", json={"physical_offsets": [stored["physical_offset"]]})
    (result,) = answer.json()["results"]
    assert result["status"] == "refused"
    assert "not a schedule queue" in result["detail"]
    assert len(await pulled(broker, "orders", 0)) == 1, "the message was put a second time"


async def test_plain_and_delayed_records_in_one_put_each_go_their_way(broker: httpx.AsyncClient) -> None:
    body = record(0) + record(0, **{Prop.DELAY_LEVEL: "1"}) + record(0)
    stored = (
        await broker.post("/internal/messages", headers={"content-type": "application/octet-stream"}, content=body)
    ).json()["stored"]
    assert [s["topic"] for s in stored] == ["orders", SCHEDULE_TOPIC, "orders"]
    assert [m.queue_offset for m in await pulled(broker, "orders", 0)] == [0, 1]


async def test_a_delivery_asked_again_or_of_a_rolled_copy_is_stored_once(broker: httpx.AsyncClient) -> None:
    stored = (
        await broker.post(
            "/internal/messages",
            headers={"content-type": "application/octet-stream"},
            content=record(1, **{Prop.DELAY_LEVEL: "3"}),
        )
    ).json()
    original = stored["stored"][0]["physical_offset"]
    rolls = (await broker.post("/internal/timers/rolls", json={"physical_offsets": [original]})).json()
    copy = rolls["results"][0]["new_offset"]

    first = (await broker.post("/internal/timers/deliveries", json={"physical_offsets": [original]})).json()
    again = (await broker.post("/internal/timers/deliveries", json={"physical_offsets": [original, copy]})).json()

    assert [r.body for r in await pulled(broker, "orders", 1)] == [b"later"], "a repeated delivery stored a copy"
    (delivered,) = first["results"]
    assert (delivered["status"], delivered["duplicate"]) == ("delivered", False)
    assert [(r["status"], r["duplicate"], r["queue_offset"]) for r in again["results"]] == [
        ("delivered", True, delivered["queue_offset"]),
        ("delivered", True, delivered["queue_offset"]),
    ]


async def test_two_scheduled_copies_of_one_message_due_at_different_times_are_both_delivered(
    broker: httpx.AsyncClient,
) -> None:
    """As two retries of one message: same id, each its own due time and attempt count."""
    offsets = []
    for delay_level in ("3", "4"):
        stored = (
            await broker.post(
                "/internal/messages",
                headers={"content-type": "application/octet-stream"},
                content=record(1, **{Prop.DELAY_LEVEL: delay_level}),
            )
        ).json()
        offsets.append(stored["stored"][0]["physical_offset"])

    answer = (await broker.post("/internal/timers/deliveries", json={"physical_offsets": offsets})).json()

    assert [r["duplicate"] for r in answer["results"]] == [False, False]
    assert len(await pulled(broker, "orders", 1)) == 2


async def test_an_offset_holding_another_message_delivers_and_rolls_the_one_expected_or_answers_it_lost(
    broker: httpx.AsyncClient,
) -> None:
    """As after a failover: the timer's entry names an offset where this log holds another message (issue 27)."""
    due = str(int(time.time() * 1000) + 3_600_000)
    stored = {}
    for name, message_id in (("a", "01A1FCE7BB289829373C3E9B000000A1"), ("b", "01A1FCE7BB289829373C3E9B000000B1")):
        props = {Prop.UNIQ_KEY: message_id, Prop.TIMER_DELIVER_MS: due}
        answer = await broker.post(
            "/internal/messages", headers={"content-type": "application/octet-stream"}, content=record(1, **props)
        )
        stored[name] = answer.json()["stored"][0]
    a, b = stored["a"], stored["b"]
    answer = await broker.get(f"/internal/topics/{TIMER_TOPIC}/queues/0/units", params={"offset": 0, "ids": "true"})
    units = read_units(answer.content, answer.headers)
    assert [u.message_id for u in units] == [a["message_id"], b["message_id"]]
    expecting_a = {"message_id": a["message_id"], "size": units[0].size, "due_ms": int(due)}
    at_b = {"physical_offsets": [b["physical_offset"]], "expected": [expecting_a]}

    (rolled,) = (await broker.post("/internal/timers/rolls", json=at_b)).json()["results"]
    assert (rolled["status"], rolled["message_id"], rolled["found_at"]) == (
        "rolled",
        a["message_id"],
        a["physical_offset"],
    )
    # The timer delivers (a's newest copy: the one just rolled), is killed before its checkpoint, and delivers
    # again: a is stored once.
    first, again = [(await broker.post("/internal/timers/deliveries", json=at_b)).json()["results"][0] for _ in "12"]
    assert [(r["status"], r["message_id"], r["found_at"], r["duplicate"]) for r in (first, again)] == [
        ("delivered", a["message_id"], rolled["new_offset"], False),
        ("delivered", a["message_id"], rolled["new_offset"], True),
    ]
    assert [m.message_id for m in await pulled(broker, "orders", 1)] == [a["message_id"]], "b was delivered for a"

    unknown = expecting_a | {"message_id": "01A1FCE7BB289829373C3E9B000000C1"}
    at_a = {"physical_offsets": [a["physical_offset"]], "expected": [unknown]}
    (lost,) = (await broker.post("/internal/timers/deliveries", json=at_a)).json()["results"]
    assert (lost["status"], lost["message_id"]) == ("lost", unknown["message_id"])
    assert "is not in this broker's schedule queues" in lost["detail"]
    metrics = (await broker.get("/metrics")).text
    assert 'petrel_broker_scheduled_mismatched_total{outcome="relocated"} 3.0' in metrics
    assert 'petrel_broker_scheduled_mismatched_total{outcome="lost"} 1.0' in metrics
