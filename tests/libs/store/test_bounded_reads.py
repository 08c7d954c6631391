"""Bounded, sliced reads: a filtered pull (QueueScan) and a query by key (KeyWalk) taken a slice at a time."""

from __future__ import annotations

import asyncio

from libs.filters import compile_filter
from libs.store.budget import ScanBudget
from tests.support.store import EVER, Stores, bodies, record

TINY_SLICE = ScanBudget(max_steps=100_000, slice_seconds=0.0)
"""Every slice is over at once: the event loop gets a turn after each look at the clock."""


async def test_a_sliced_pull_answers_as_one_pull_does_and_lets_the_loop_run_meanwhile(stores: Stores) -> None:
    store = stores.open(segment_size=4 * 1024 * 1024, cq_units_per_file=1000)
    store.append(b"".join(record("T", 0, f"{n}".encode(), tag="A" if n % 700 == 0 else "B") for n in range(3000)))
    wanted = compile_filter("TAG", "A")
    turns = 0

    async def counting() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.ensure_future(counting())
    sliced = await store.pull_in_slices("T", 0, 0, 32, wanted, TINY_SLICE)
    counter.cancel()

    assert (bodies(sliced), sliced.next_offset) == ([b"0", b"700", b"1400", b"2100", b"2800"], 3000)
    assert bodies(store.pull("T", 0, 0, 32, wanted)) == bodies(sliced)
    assert turns >= 3000 // 16 - 1, f"the loop ran {turns} times during a scan of 3000 units"


async def test_a_sliced_pull_reads_at_most_its_bound_and_says_where_to_go_on(stores: Stores) -> None:
    store = stores.open(segment_size=4 * 1024 * 1024, cq_units_per_file=1000)
    store.append(b"".join(record("T", 0, f"{n}".encode(), tag="A" if n == 2500 else "B") for n in range(3000)))
    wanted = compile_filter("TAG", "A")
    budget = ScanBudget(max_steps=1000)

    first = await store.pull_in_slices("T", 0, 0, 32, wanted, budget)
    second = await store.pull_in_slices("T", 0, first.next_offset, 32, wanted, budget)
    third = await store.pull_in_slices("T", 0, second.next_offset, 32, wanted, budget)

    assert [(bodies(r), r.next_offset) for r in (first, second, third)] == [([], 1000), ([], 2000), ([b"2500"], 3000)]


async def test_a_sliced_key_query_finds_what_an_unbounded_one_does(stores: Stores) -> None:
    store = stores.open(index_slot_count=16, index_max_entries=400)
    for n in range(1000):  # three files; the key's chain shares its slot with other keys
        await store.put(record("T", 0, f"{n}".encode(), keys=[f"k{n % 50}"]))

    found = await store.query_key_in_slices("T", "k7", *EVER, 32, ScanBudget(max_steps=100_000, slice_seconds=0.0))

    assert not found.truncated
    assert [r.body for r in found.records] == [r.body for r in store.query_key("T", "k7", *EVER)]
    assert [r.body for r in found.records] == [f"{n}".encode() for n in range(957, 0, -50)]


async def test_a_key_query_past_its_bound_answers_what_it_found_marked_truncated(stores: Stores) -> None:
    store = stores.open(index_slot_count=16, index_max_entries=400)
    for n in range(1000):
        await store.put(record("T", 0, f"{n}".encode(), keys=[f"k{n % 50}"]))

    found = await store.query_key_in_slices("T", "k7", *EVER, 32, ScanBudget(max_steps=60))

    assert found.truncated
    assert [r.body for r in found.records] == [f"{n}".encode() for n in range(957, 957 - 50 * len(found.records), -50)]
    assert 0 < len(found.records) < 20
