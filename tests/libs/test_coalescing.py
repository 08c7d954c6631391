"""PutCoalescer and CallCoalescer: the algorithm, against a broker stand-in that records what it was sent."""

import asyncio

import pytest

from libs.broker_api.coalescing import CallCoalescer, PutCoalescer, per_record, stored_entry
from libs.broker_api.schemas import PutAnswer, PutEntry
from libs.errors import BrokerUnavailable, PetrelError, PutQueueFull, StoreFull
from tests.support.put_broker import Broker, entry


async def test_an_idle_send_goes_at_once() -> None:
    broker = Broker()
    outcome = await PutCoalescer(broker.put).submit(b"ab", 2)
    assert broker.puts == [b"ab"]
    assert [o.queue_offset for o in outcome if isinstance(o, PutEntry)] == [0, 1]


async def test_sends_made_in_one_loop_turn_share_one_put_even_when_the_broker_answers_at_once() -> None:
    """A broker in the gateway's process (colocated) answers within the turn: the sends of a turn still go together."""
    broker = Broker()
    coalescer = PutCoalescer(broker.put)

    outcomes = await asyncio.gather(*(coalescer.submit(body, len(body)) for body in (b"a", b"bb", b"c")))

    assert broker.puts == [b"abbc"]
    assert [[o.queue_offset for o in outcome if isinstance(o, PutEntry)] for outcome in outcomes] == [[0], [1, 2], [3]]


async def test_sends_waiting_for_a_free_slot_share_one_put() -> None:
    broker = Broker()
    broker.release.clear()
    coalescer = PutCoalescer(broker.put, max_in_flight=1)
    first = asyncio.create_task(coalescer.submit(b"a", 1))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(coalescer.submit(body, len(body))) for body in (b"bb", b"c", b"ddd")]
    await asyncio.sleep(0)
    broker.release.set()

    outcomes = await asyncio.gather(first, *waiting)

    assert broker.puts == [b"a", b"bbcddd"]
    offsets = [[o.queue_offset for o in outcome if isinstance(o, PutEntry)] for outcome in outcomes]
    assert offsets == [[0], [1, 2], [3], [4, 5, 6]]


async def test_a_failed_put_fails_every_record_it_carried() -> None:
    broker = Broker()
    broker.failure = BrokerUnavailable("broker-a did not answer")
    outcome = await PutCoalescer(broker.put).submit(b"abc", 3)
    assert [type(o) for o in outcome] == [BrokerUnavailable] * 3


async def test_a_partial_answer_fails_exactly_the_records_not_stored() -> None:
    broker = Broker(store_at_most=3)
    broker.release.clear()
    coalescer = PutCoalescer(broker.put, max_in_flight=1)
    blocker = asyncio.create_task(coalescer.submit(b"z", 1))
    await asyncio.sleep(0)
    first = asyncio.create_task(coalescer.submit(b"ab", 2))
    second = asyncio.create_task(coalescer.submit(b"cde", 3))
    await asyncio.sleep(0)
    broker.release.set()
    await blocker

    a, b = await asyncio.gather(first, second)

    assert [isinstance(o, PutEntry) for o in a + b] == [True, True, True, False, False]
    assert isinstance(b[1], StoreFull)
    assert b[1].detail == "disk full"


async def test_a_caller_that_went_away_does_not_shift_the_others() -> None:
    broker = Broker()
    broker.release.clear()
    coalescer = PutCoalescer(broker.put, max_in_flight=1)
    blocker = asyncio.create_task(coalescer.submit(b"z", 1))
    await asyncio.sleep(0)
    gone = asyncio.create_task(coalescer.submit(b"ab", 2))
    kept = asyncio.create_task(coalescer.submit(b"c", 1))
    await asyncio.sleep(0)
    gone.cancel()
    broker.release.set()
    await blocker

    (only,) = await kept
    assert isinstance(only, PutEntry)
    assert only.queue_offset == 3, "the cancelled caller's two records were stored before this one"
    with pytest.raises(asyncio.CancelledError):
        await gone


async def test_calls_waiting_for_a_free_slot_share_one_call_and_each_gets_its_own_result() -> None:
    calls: list[list[str]] = []
    release = asyncio.Event()

    async def call(items: list[str]) -> list[str | PetrelError]:
        calls.append(items)
        await release.wait()
        return [PetrelError(f"no {item}") if item == "bad" else item.upper() for item in items]

    coalescer: CallCoalescer[str, str] = CallCoalescer(call, max_in_flight=1)
    first = asyncio.create_task(coalescer.submit("a"))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(coalescer.submit(item)) for item in ("b", "bad", "c")]
    await asyncio.sleep(0)
    release.set()

    results = await asyncio.gather(first, *waiting)

    assert calls == [["a"], ["b", "bad", "c"]]
    assert [results[0], results[1], results[3]] == ["A", "B", "C"]
    refused = results[2]
    assert isinstance(refused, PetrelError), "one item's refusal is its own"
    assert refused.detail == "no bad"


async def test_items_submitted_in_one_loop_turn_share_one_call_while_slots_are_free() -> None:
    """As puts: ends (and push acks) made in one turn go in one call, not one call each up to max_in_flight."""
    calls: list[list[str]] = []

    async def call(items: list[str]) -> list[str | PetrelError]:
        calls.append(items)
        return [item.upper() for item in items]

    coalescer: CallCoalescer[str, str] = CallCoalescer(call, max_in_flight=4)

    results = await asyncio.gather(*(coalescer.submit(item) for item in ("a", "b", "c")))

    assert calls == [["a", "b", "c"]]
    assert results == ["A", "B", "C"]


async def test_a_failed_call_fails_each_of_its_items_and_the_next_call_goes_out() -> None:
    async def call(items: list[str]) -> list[str | PetrelError]:
        if "down" in items:
            raise BrokerUnavailable("broker a did not answer")
        return [*items]

    coalescer: CallCoalescer[str, str] = CallCoalescer(call)
    failed = await coalescer.submit("down")
    assert isinstance(failed, BrokerUnavailable)
    assert await coalescer.submit("up") == "up"
    assert coalescer.in_flight == 0


async def test_records_waiting_for_a_slow_broker_are_bounded() -> None:
    broker = Broker()
    broker.release.clear()
    coalescer = PutCoalescer(broker.put, max_in_flight=1, max_queued_bytes=8, broker="broker-a")
    first = asyncio.create_task(coalescer.submit(b"a", 1))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(coalescer.submit(b"bbbb", 4)) for _ in range(2)]
    await asyncio.sleep(0)

    refused = await coalescer.submit(b"c", 1)

    assert coalescer.queued_bytes == 8, "the queue holds no more than its bound"
    assert [type(r) for r in refused] == [PutQueueFull]
    assert isinstance(refused[0], BrokerUnavailable), "nothing was sent: the sender may try another broker"
    broker.release.set()
    outcomes = await asyncio.gather(first, *waiting)
    assert broker.puts == [b"a", b"bbbbbbbb"], "the refused send was never put"
    assert all(isinstance(o, PutEntry) for outcome in outcomes for o in outcome)
    assert coalescer.queued_bytes == 0
    assert isinstance((await coalescer.submit(b"c", 1))[0], PutEntry), "room again: sends go through"


async def test_one_send_larger_than_the_bound_still_goes_when_nothing_waits() -> None:
    broker = Broker()
    coalescer = PutCoalescer(broker.put, max_queued_bytes=2)
    outcome = await coalescer.submit(b"abcd", 4)
    assert [o.queue_offset for o in outcome if isinstance(o, PutEntry)] == [0, 1, 2, 3]


def test_records_stored_without_the_disk_confirming_them_are_flush_timeouts_that_say_where() -> None:
    answer = PutAnswer(stored=[entry(0), entry(1)], not_durable="the disk did not confirm the write within 5 ms")

    outcome = per_record(answer, 3)

    assert [type(o).__name__ for o in outcome] == ["FlushTimeout", "FlushTimeout", "PetrelError"]
    timeouts = [o for o in outcome[:2] if isinstance(o, PetrelError)]
    assert [stored_entry(o) for o in timeouts] == [entry(0), entry(1)]
    assert {o.detail for o in timeouts} == {"the disk did not confirm the write within 5 ms"}
