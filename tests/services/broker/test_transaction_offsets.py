"""Ends by the half's CommitLog offset, as a transaction id carries it (issue 29): one record read when it is the
half, the index when it is not, and never a transaction ended twice for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from libs.codec import encode_record
from libs.message import MessageRecord, Prop
from libs.names import TRANS_HALF_TOPIC
from libs.store.config import FlushMode
from services.broker.app import create_app
from services.broker.context import BrokerContext
from tests.support.apps import broker_settings, in_process_with_state
from tests.support.broker_calls import put_half, topic_records
from tests.support.serving import ServedApp

Broker = tuple[httpx.AsyncClient, BrokerContext]


async def serve(settings: Any) -> AsyncIterator[Broker]:
    async for client, state in in_process_with_state(create_app(settings)):
        await client.put("/internal/topics/orders", json={"read_queues": 2, "write_queues": 2})
        yield client, state["broker"]


@pytest.fixture
async def broker(nameserver: ServedApp) -> AsyncIterator[Broker]:
    async for served in serve(broker_settings(nameserver)):
        yield served


async def end_at(client: httpx.AsyncClient, message_id: str, outcome: str, half_offset: int) -> dict[str, Any]:
    """The broker's result of ending one transaction by the offset its id carries."""
    entry = {"message_id": message_id, "outcome": outcome, "half_offset": half_offset}
    answer = await client.post("/internal/transactions:end", json={"ends": [entry]})
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["results"][0]
    return result


def index_walks(ctx: BrokerContext, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The look-ups through the IndexFile the store is asked for from now on."""
    walks: list[str] = []

    def counted(name: str) -> Callable[..., Any]:
        original = getattr(ctx.store, name)

        def walk(*args: Any, **kwargs: Any) -> Any:
            walks.append(name)
            return original(*args, **kwargs)

        return walk

    for name in ("query_id", "query_key"):
        monkeypatch.setattr(ctx.store, name, counted(name))
    return walks


async def delivered(client: httpx.AsyncClient) -> list[str]:
    return [r.message_id or "" for r in await topic_records(client, "orders", 1)]


async def test_a_commit_by_offset_reads_the_half_there_instead_of_walking_the_index(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, ctx = broker
    stored = await put_half(client, "TX1")
    walks = index_walks(ctx, monkeypatch)

    first = await end_at(client, "TX1", "COMMIT", stored["physical_offset"])

    assert first["ended"]["first"] is True, first
    assert walks == [], "the commit walked the index although its id said where the half is"
    (copy,) = await topic_records(client, "orders", 1)
    assert (copy.message_id, copy.body, copy.queue_offset) == ("TX1", b"pay order 7", first["ended"]["queue_offset"])
    again = await end_at(client, "TX1", "COMMIT", stored["physical_offset"])
    assert (again["ended"]["first"], again["ended"]["queue_offset"]) == (False, copy.queue_offset)
    conflict = await end_at(client, "TX1", "ROLLBACK", stored["physical_offset"])
    assert (conflict["failure"]["status"], conflict["failure"]["extensions"]["outcome"]) == (409, "COMMIT")
    assert await delivered(client) == ["TX1"]


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(lambda mine, other: other, id="another-transactions-half"),
        pytest.param(lambda mine, other: mine + 1, id="inside-the-half"),
        pytest.param(lambda mine, other: 10**12, id="past-the-end"),
        pytest.param(lambda mine, other: 0, id="a-record-of-another-topic"),
    ],
)
async def test_an_offset_that_is_not_the_half_commits_the_right_half_through_the_index(
    broker: Broker, where: Callable[[int, int], int]
) -> None:
    client, _ = broker
    plain = encode_record(MessageRecord(topic="orders", body=b"plain", queue_id=0))
    await client.post("/internal/messages", headers={"content-type": "application/octet-stream"}, content=plain)
    mine = (await put_half(client, "MINE"))["physical_offset"]
    other = (await put_half(client, "OTHER"))["physical_offset"]

    result = await end_at(client, "MINE", "COMMIT", where(mine, other))

    assert result["ended"]["first"] is True, result
    assert await delivered(client) == ["MINE"]
    assert (await client.get("/internal/transactions/OTHER")).json()["state"] == "OPEN"
    assert (await end_at(client, "MINE", "ROLLBACK", mine))["failure"]["status"] == 409


async def test_a_half_whose_segment_was_deleted_is_ended_by_its_renewed_copy(nameserver: ServedApp) -> None:
    settings = broker_settings(nameserver, segment_size=64 * 1024, flush_mode=FlushMode.SYNC_FLUSH)
    async for client, ctx in serve(settings):
        first = await put_half(client, "TX1")
        filler = encode_record(MessageRecord(topic="orders", body=b"x" * 8000, queue_id=0))
        while ctx.store.commitlog.write_offset < 64 * 1024:  # the half's segment is full: the next one is written
            await client.post(
                "/internal/messages", headers={"content-type": "application/octet-stream"}, content=filler
            )
        renewed = await client.post("/internal/transactions/TX1/checked", json={"physical_offset": 0})
        assert renewed.status_code == 200, renewed.text
        assert ctx.store.delete_expired(force=True) == 1
        assert ctx.store.commitlog.min_offset > first["physical_offset"]

        result = await end_at(client, "TX1", "COMMIT", first["physical_offset"])

        assert result["ended"]["first"] is True, result
        assert await delivered(client) == ["TX1"]


async def test_outcomes_memory_let_go_of_are_not_taken_for_open_transactions(nameserver: ServedApp) -> None:
    # 16 kept: memory lets go of the oldest outcomes past 17 (a sixteenth more).
    async for client, _ in serve(broker_settings(nameserver, ended_transactions_kept=16)):
        offsets = {f"TX{i}": (await put_half(client, f"TX{i}"))["physical_offset"] for i in range(20)}
        for message_id, offset in offsets.items():
            assert (await end_at(client, message_id, "COMMIT", offset))["ended"]["first"] is True

        again = await end_at(client, "TX0", "COMMIT", offsets["TX0"])
        conflict = await end_at(client, "TX1", "ROLLBACK", offsets["TX1"])

        assert again["ended"]["first"] is False, "a transaction memory forgot was committed a second time"
        assert conflict["failure"]["extensions"]["outcome"] == "COMMIT"
        assert sorted(await delivered(client)) == sorted(offsets)


async def test_ends_by_offset_across_a_restart_answer_each_transaction_once(
    nameserver: ServedApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = broker_settings(nameserver)
    async for client, _ in serve(settings):
        before = {m: (await put_half(client, m))["physical_offset"] for m in ("ENDED", "OPEN", "TORN")}
        assert (await end_at(client, "ENDED", "COMMIT", before["ENDED"]))["ended"]["first"] is True
        # A commit the broker crashed in: its committed copy was written, its op record torn off (and truncated).
        torn = encode_record(MessageRecord(topic="orders", body=b"pay", queue_id=1, properties={Prop.UNIQ_KEY: "TORN"}))
        await client.post("/internal/messages", headers={"content-type": "application/octet-stream"}, content=torn)
    async for client, ctx in serve(settings):
        assert (await end_at(client, "ENDED", "COMMIT", before["ENDED"]))["ended"]["first"] is False
        assert (await end_at(client, "ENDED", "ROLLBACK", before["ENDED"]))["failure"]["status"] == 409
        assert (await end_at(client, "OPEN", "COMMIT", before["OPEN"]))["ended"]["first"] is True
        assert (await end_at(client, "TORN", "COMMIT", before["TORN"]))["ended"]["first"] is True
        after = (await put_half(client, "AFTER"))["physical_offset"]
        walks = index_walks(ctx, monkeypatch)
        assert (await end_at(client, "AFTER", "COMMIT", after))["ended"]["first"] is True
        assert walks == [], "a half stored since the restart was looked up in the index"
        assert sorted(await delivered(client)) == ["AFTER", "ENDED", "OPEN", "TORN"], "one committed copy each"
        halves = await topic_records(client, TRANS_HALF_TOPIC)
        assert [h.physical_offset for h in halves] == [*before.values(), after]
