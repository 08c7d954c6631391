"""A put whose records cannot all be stored here is refused whole, naming the first record that cannot: a topic
or queue this broker does not have (404), bytes that are not a record (400, the caller's: not a corrupt store's 500)."""

from collections.abc import AsyncIterator

import httpx
import pytest

from libs.codec import encode_record, iter_records
from libs.message import MessageRecord, Prop
from services.broker.app import create_app
from tests.support.apps import broker_settings, in_process
from tests.support.serving import ServedApp

BINARY = {"content-type": "application/octet-stream"}


@pytest.fixture
async def broker(nameserver: ServedApp) -> AsyncIterator[httpx.AsyncClient]:
    async for client in in_process(create_app(broker_settings(nameserver))):
        for topic in ("orders", "refunds"):
            await client.put(f"/internal/topics/{topic}", json={"read_queues": 2, "write_queues": 2})
        yield client


def record(topic: str = "orders", queue_id: int = 0) -> bytes:
    properties = {Prop.UNIQ_KEY: f"ID-{topic}-{queue_id}", Prop.TAGS: "paid"}
    return encode_record(MessageRecord(topic=topic, body=b"order 7", queue_id=queue_id, properties=properties))


async def put(broker: httpx.AsyncClient, *records: bytes) -> httpx.Response:
    return await broker.post("/internal/messages", headers=BINARY, content=b"".join(records))


async def stored(broker: httpx.AsyncClient) -> int:
    count = 0
    for topic in ("orders", "refunds"):
        for queue in (0, 1):
            answer = await broker.get(f"/internal/topics/{topic}/queues/{queue}/messages", params={"offset": 0})
            count += len(list(iter_records(answer.content)))
    return count


@pytest.mark.parametrize(
    ("records", "status", "kind", "detail"),
    [
        (
            [record(), record("refunds", 1), record("nowhere"), record(queue_id=7)],
            404,
            "topic-not-found",
            "record 2: topic 'nowhere' does not exist on this broker",
        ),
        (
            [record(), record(queue_id=7), record("nowhere")],
            404,
            "queue-not-found",
            "record 1: orders has no writable queue 7 here (0 to 1)",
        ),
        (
            [record(), record("refunds"), record()[:-1]],
            400,
            "malformed-body",
            "record 2 (byte 322 of the body): record claims",
        ),
        (  # the torn record takes the next one's first byte: its own fields still add up, the next's do not
            [record(), record()[:-1] + record("nowhere")],
            400,
            "malformed-body",
            "record 2 (byte 320 of the body): bad magic",
        ),
        ([record("nowhere"), record()[:-1]], 404, "topic-not-found", "record 0: topic 'nowhere'"),
    ],
    ids=["unknown topic", "no such queue", "torn last record", "torn before an unknown topic", "unknown before torn"],
)
async def test_a_batch_with_a_record_that_cannot_be_stored_stores_none(
    broker: httpx.AsyncClient, records: list[bytes], status: int, kind: str, detail: str
) -> None:
    answer = await put(broker, *records)

    assert answer.status_code == status, answer.text
    assert answer.json()["type"].endswith(f"/{kind}")
    assert detail in answer.json()["detail"]
    assert await stored(broker) == 0
    assert (await put(broker, record(), record("refunds", 1))).status_code == 200
    assert await stored(broker) == 2
