"""GET /v1/topics/{topic}/queues/{queue_id}/offsets: where a queue begins and ends, also once retention trimmed it
(a pull at offset 0 is then 416), and the first offset stored since a time (issue 28)."""

from typing import Any

import httpx
import pytest

from tests.support.gateway_calls import problem_type, pull

BODY = "r" * 1000  # about 1.1 KB a record: some 57 to a 64 KiB segment


@pytest.fixture
def broker_overrides() -> dict[str, Any]:
    return {"segment_size": 64 * 1024}


async def offsets(gateway: httpx.AsyncClient, topic: str, queue: int, broker: str, **params: Any) -> Any:
    answer = await gateway.get(f"/v1/topics/{topic}/queues/{queue}/offsets", params={"broker": broker, **params})
    assert answer.status_code == 200, answer.text
    return answer.json()


async def test_a_trimmed_queue_answers_where_it_begins(gateway: httpx.AsyncClient, brokers: dict[str, Any]) -> None:
    await gateway.put("/v1/topics/trimmed", json={"queues": 1})
    for _ in range(8):
        batch = {"messages": [{"body": BODY} for _ in range(50)]}
        assert (await gateway.post("/v1/topics/trimmed/messages:batch", json=batch)).status_code == 200
    store = brokers["broker-a"].app.state["broker"].store
    await store.flusher.flush()
    assert len(store.commitlog.segments) >= 2, "too few messages reached broker-a to fill a segment"
    end = store.queue_offsets("trimmed", 0)[1]
    assert await offsets(gateway, "trimmed", 0, "broker-a") == {
        "topic": "trimmed",
        "queue_id": 0,
        "broker": "broker-a",
        "min_offset": 0,
        "max_offset": end,
        "offset_for_timestamp": None,
    }

    assert store.delete_expired(force=True) == 1
    found = await offsets(gateway, "trimmed", 0, "broker-a")
    low = found["min_offset"]
    assert 0 < low < end == found["max_offset"]
    from_zero = await gateway.get("/v1/topics/trimmed/queues/0/messages", params={"broker": "broker-a", "offset": 0})
    assert from_zero.status_code == 416, "a pull below the trimmed queue's start is no longer refused"
    first = (await pull(gateway, "trimmed", 0, "broker-a", offset=low, max=1))["messages"]
    assert [m["queue_offset"] for m in first] == [low]

    assert (await offsets(gateway, "trimmed", 0, "broker-a", timestamp=0))["offset_for_timestamp"] == low
    later = (await pull(gateway, "trimmed", 0, "broker-a", offset=low + 5, max=1))["messages"][0]
    since = (await offsets(gateway, "trimmed", 0, "broker-a", timestamp=later["stored_at"]))["offset_for_timestamp"]
    assert low <= since <= low + 5
    at_since = (await pull(gateway, "trimmed", 0, "broker-a", offset=since, max=1))["messages"][0]
    assert at_since["stored_at"] == later["stored_at"]
    if since > low:
        before = (await pull(gateway, "trimmed", 0, "broker-a", offset=since - 1, max=1))["messages"][0]
        assert before["stored_at"] < later["stored_at"]
    future = await offsets(gateway, "trimmed", 0, "broker-a", timestamp=later["stored_at"] + 10**9)
    assert future["offset_for_timestamp"] == end


async def test_offsets_errors_are_those_of_a_pull(gateway: httpx.AsyncClient) -> None:
    await gateway.put("/v1/topics/orders", json={"queues": 2})
    ambiguous = await gateway.get("/v1/topics/orders/queues/0/offsets")
    assert ambiguous.status_code == 400
    assert ambiguous.json()["brokers"] == ["broker-a", "broker-b"]
    no_queue = await gateway.get("/v1/topics/orders/queues/9/offsets", params={"broker": "broker-a"})
    assert problem_type(no_queue) == "queue-not-found"
    assert problem_type(await gateway.get("/v1/topics/nothing/queues/0/offsets")) == "topic-not-found"
    system = await gateway.get("/v1/topics/RMQ_SYS_TRANS_HALF_TOPIC/queues/0/offsets")
    assert problem_type(system) == "reserved-topic-name"
