"""Filter scans and key queries are bounded per request and never hold the broker's event loop.

A pull or receive whose filter matches nothing reads at most `filter_scan_max_units` units
and says where to go on; a key whose index chain is long is answered after at most
`key_query_max_entries` entries, marked truncated; meanwhile /healthz keeps being answered: the
work yields the loop all along (counted in turns and shares of the work, not in seconds, so a
slow day is no failure).
"""

from __future__ import annotations

import time
import zlib

import httpx
import pytest

from libs.broker_api.frames import decode_leased
from libs.broker_api.wire import NEXT_OFFSET, TRUNCATED
from libs.codec import encode_record, iter_records
from libs.message import KEY_SEPARATOR, MessageRecord, Prop
from services.broker.app import create_app
from tests.support.apps import SMALL_STORE, broker_settings, in_process
from tests.support.broker_calls import make_group
from tests.support.loop_latency import healthz_while
from tests.support.serving import ServedApp

TURNS = 10
"""/healthz is answered at least this often while the work runs (a work that never yields: once)"""
SHARE = 0.5
"""and no probe waits for more than this share of the work's time on the loop"""
BINARY = {"content-type": "application/octet-stream"}
"""The broker's batch put takes the wire format, not JSON."""
COSTLY = " OR ".join(f"p{n}='w'" for n in range(256))
"""An SQL92 filter at the conditions limit that matches none of the messages put: each costs 256 comparisons."""
PROPERTIES = {f"p{n}": "other" for n in range(256)}


async def put_many(broker: httpx.AsyncClient, count: int, wanted_at: int | None = None) -> None:
    """`count` messages on orders/0, none with `wanted = 'yes'` but the one at `wanted_at`."""
    for start in range(0, count, 500):
        batch = [
            encode_record(
                MessageRecord(
                    topic="orders",
                    body=f"m{n}".encode(),
                    queue_id=0,
                    properties={
                        Prop.UNIQ_KEY: f"ID-{n}",
                        Prop.TAGS: "paid",
                        "wanted": "yes" if n == wanted_at else "no",
                    }
                    | PROPERTIES,
                )
            )
            for n in range(start, min(start + 500, count))
        ]
        answer = await broker.post("/internal/messages", headers=BINARY, content=b"".join(batch))
        assert answer.status_code == 200, answer.text


async def pull(broker: httpx.AsyncClient, offset: int, sql: str) -> tuple[list[str], int]:
    answer = await broker.get(
        "/internal/topics/orders/queues/0/messages", params={"offset": offset, "max": 32, "sql": sql}
    )
    assert answer.status_code == 200, answer.text
    return [r.body.decode() for r in iter_records(answer.content)], int(answer.headers[NEXT_OFFSET])


async def receive(broker: httpx.AsyncClient, sql: str, wait_ms: int = 0) -> list[str]:
    body = {"max_messages": 32, "invisible_ms": 30_000, "wait_ms": wait_ms, "filter_type": "SQL92", "expression": sql}
    answer = await broker.post("/internal/groups/billing/topics/orders/receive", json=body)
    assert answer.status_code == 200, answer.text
    return [r.body.decode() for r in iter_records(decode_leased(answer.content)[1])]


async def orders(broker: httpx.AsyncClient) -> None:
    answer = await broker.put("/internal/topics/orders", json={"read_queues": 1, "write_queues": 1})
    assert answer.status_code == 200, answer.text


async def test_a_pull_whose_filter_matches_nothing_stops_at_its_bound_and_says_where_to_go_on(
    nameserver: ServedApp,
) -> None:
    async for broker in in_process(create_app(broker_settings(nameserver, filter_scan_max_units=1000))):
        await orders(broker)
        await put_many(broker, 2500, wanted_at=2300)

        assert await pull(broker, 0, "wanted = 'yes'") == ([], 1000)
        assert await pull(broker, 1000, "wanted = 'yes'") == ([], 2000)
        assert await pull(broker, 2000, "wanted = 'yes'") == (["m2300"], 2500)


async def test_a_receive_whose_filter_matches_nothing_answers_at_its_bound_and_goes_on_from_there(
    nameserver: ServedApp,
) -> None:
    async for broker in in_process(create_app(broker_settings(nameserver, filter_scan_max_units=1000))):
        await orders(broker)
        await make_group(broker)
        await put_many(broker, 2500, wanted_at=2300)

        started = time.monotonic()
        assert await receive(broker, "wanted = 'yes'", wait_ms=20_000) == []
        assert time.monotonic() - started < 10, "a receive that read its bound waited for new messages"
        assert await receive(broker, "wanted = 'yes'") == []
        assert await receive(broker, "wanted = 'yes'") == ["m2300"]


@pytest.mark.parametrize("how", ["pull", "receive"])
async def test_the_event_loop_keeps_answering_while_a_filter_scans_thousands_of_units(
    nameserver: ServedApp, how: str
) -> None:
    async for broker in in_process(create_app(broker_settings(nameserver, filter_scan_max_units=100_000))):
        await orders(broker)
        await make_group(broker)
        await put_many(broker, 1500)

        scan = pull(broker, 0, COSTLY) if how == "pull" else receive(broker, COSTLY)
        found, latencies = await healthz_while(broker, scan)

        assert found in (([], 1500), [])
        assert latencies.turns >= TURNS, f"/healthz answered {latencies.turns} times while a {how} scanned"
        assert latencies.longest_share < SHARE, f"one /healthz waited {latencies.longest_share:.0%} of a {how}'s scan"


async def test_a_refused_filter_is_a_400_naming_the_limit(nameserver: ServedApp) -> None:
    async for broker in in_process(create_app(broker_settings(nameserver, filter_max_conditions=8))):
        await orders(broker)
        await make_group(broker)
        nested = "(" * 101 + "a = 1" + ")" * 101
        for sql, reason in [
            ("a = 'x' OR " * 400 + "a = 'y'", "is 4407 characters long, more than 4096"),
            (nested, "parentheses nest more than 100 deep"),
            (" OR ".join(["a = 1"] * 9), "more than 8 conditions"),
        ]:
            answer = await broker.get("/internal/topics/orders/queues/0/messages", params={"offset": 0, "sql": sql})
            assert answer.status_code == 400, answer.text
            assert answer.json()["type"] == "https://petrel.dev/problems/invalid-filter"
            assert reason in answer.json()["detail"]

        body = {"max_messages": 1, "invisible_ms": 30_000, "filter_type": "SQL92", "expression": nested}
        answer = await broker.post("/internal/groups/billing/topics/orders/receive", json=body)
        assert answer.status_code == 400, answer.text
        assert "parentheses nest more than 100 deep" in answer.json()["detail"]


# ---- query by key ----------------------------------------------------------------------------

SLOTS = 4096
KEYS_PER_MESSAGE = 5000
"""A message may carry a key many times: each is an IndexFile entry, all in one chain."""


def same_slot_as(key: str) -> str:
    """Another key whose entries share `key`'s chain: a query for it walks every entry of `key`."""
    slot = zlib.crc32(f"orders#{key}".encode()) % SLOTS
    return next(
        f"probe-{n}"
        for n in range(1_000_000)
        if zlib.crc32(f"orders#probe-{n}".encode()) % SLOTS == slot
        and zlib.crc32(f"orders#probe-{n}".encode()) != zlib.crc32(f"orders#{key}".encode())
    )


async def put_hot_key(broker: httpx.AsyncClient, messages: int) -> None:
    keys = KEY_SEPARATOR.join(["hot"] * KEYS_PER_MESSAGE)
    for start in range(0, messages, 20):
        batch = [
            encode_record(
                MessageRecord(topic="orders", body=f"m{n}".encode(), queue_id=0, properties={Prop.KEYS: keys})
            )
            for n in range(start, min(start + 20, messages))
        ]
        answer = await broker.post("/internal/messages", headers=BINARY, content=b"".join(batch))
        assert answer.status_code == 200, answer.text


async def query(broker: httpx.AsyncClient, key: str) -> tuple[list[str], bool]:
    answer = await broker.get("/internal/messages", params={"topic": "orders", "key": key, "max": 8})
    assert answer.status_code == 200, answer.text
    return [r.body.decode() for r in iter_records(answer.content)], answer.headers.get(TRUNCATED) == "true"


async def test_a_key_query_past_its_bound_answers_what_it_found_marked_truncated(nameserver: ServedApp) -> None:
    settings = broker_settings(nameserver, key_query_max_entries=12_000, index_max_entries=100_000)
    async for broker in in_process(create_app(settings)):
        await orders(broker)
        await put_hot_key(broker, 4)  # 20,000 entries in one chain

        assert await query(broker, same_slot_as("hot")) == ([], True)
        assert await query(broker, "hot") == (["m3", "m2", "m1"], True)  # m0's entries are 15,001 to 20,000th


async def test_the_event_loop_keeps_answering_while_a_key_query_walks_a_long_chain(nameserver: ServedApp) -> None:
    settings = broker_settings(nameserver, key_query_max_entries=10_000_000, index_max_entries=1_300_000)
    assert settings.index_slot_count == SMALL_STORE["index_slot_count"] == SLOTS
    async for broker in in_process(create_app(settings)):
        await orders(broker)
        await put_hot_key(broker, 240)  # 1,200,000 entries in one chain

        found, latencies = await healthz_while(broker, query(broker, same_slot_as("hot")))

        assert found == ([], False)
        assert latencies.turns >= TURNS, f"/healthz answered {latencies.turns} times while a key query walked"
        assert latencies.longest_share < SHARE, f"one /healthz waited {latencies.longest_share:.0%} of the walk"
