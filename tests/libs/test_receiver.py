"""Receiver's two phases against fake brokers: who is asked, in which order, and when the wait ends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import pytest

from libs.broker_api.client import BrokerClient
from libs.broker_api.frames import Lease
from libs.broker_api.receiver import Receive, Receiver
from libs.broker_api.route_cache import RouteCache
from libs.errors import BrokerUnavailable, GroupNotFound, InvalidFilter, PetrelError
from libs.http.client import InternalClient
from libs.routing import BrokerData, QueueData, TopicRoute
from libs.topic import MessageType, Perm


class FakeRoutes(RouteCache):
    def __init__(self, brokers: list[str]) -> None:
        self.route = TopicRoute(
            topic="orders",
            queues=[
                QueueData(
                    broker_name=b, read_queues=4, write_queues=4, perm=Perm.READ_WRITE, message_type=MessageType.NORMAL
                )
                for b in brokers
            ],
            brokers=[BrokerData(cluster="c", broker_name=b, addresses={0: f"{b}:1"}) for b in brokers],
        )
        self.invalidated = 0

    async def get(self, topic: str) -> TopicRoute:
        return self.route

    def invalidate(self, topic: str) -> None:
        self.invalidated += 1


class FakeBrokers(BrokerClient):
    """Each broker holds a count of messages; `arrive` adds some and wakes waiting calls."""

    def __init__(self, brokers: list[str]) -> None:
        super().__init__(InternalClient())
        self.held = dict.fromkeys(brokers, 0)
        self.failures: dict[str, PetrelError] = {}
        self.receives: list[tuple[str, int, int]] = []
        self.readies: list[str] = []
        self.changed = asyncio.Condition()
        self.steal_next = False

    async def arrive(self, broker: str, count: int = 1) -> None:
        async with self.changed:
            self.held[broker] += count
            self.changed.notify_all()

    async def receive(
        self, broker: str, address: str, group: str, topic: str, body: Mapping[str, Any]
    ) -> tuple[list[Lease], memoryview]:
        self.receives.append((broker, body["max_messages"], body["wait_ms"]))
        if broker in self.failures:
            raise self.failures[broker]
        if self.steal_next:  # another consumer got there first
            self.steal_next = False
            self.held[broker] = 0
        await self._wait_for(broker, body["wait_ms"])
        taken = min(self.held[broker], body["max_messages"])
        self.held[broker] -= taken
        return [Lease(f"{broker}-{i}", 1, 0) for i in range(taken)], memoryview(b"")

    async def ready(self, broker: str, address: str, group: str, topic: str, params: Mapping[str, str | int]) -> bool:
        self.readies.append(broker)
        if broker in self.failures:
            raise self.failures[broker]
        await self._wait_for(broker, int(params["wait_ms"]))
        return self.held[broker] > 0

    async def _wait_for(self, broker: str, wait_ms: int) -> None:
        async with self.changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait_for(lambda: self.held[broker] > 0), wait_ms / 1000)


def receiver(names: list[str]) -> tuple[Receiver, FakeBrokers, FakeRoutes]:
    brokers, routes = FakeBrokers(names), FakeRoutes(names)
    return Receiver(routes, brokers), brokers, routes


async def settle() -> None:
    """Let every task run until it waits on a fake broker (they do no I/O: a few loop turns suffice)."""
    for _ in range(50):
        await asyncio.sleep(0)


def asking(max_messages: int = 10, wait_seconds: float = 0) -> Receive:
    """A receive as the route builds one from the public defaults (a 30 s lease, no filter)."""
    return Receive(max_messages=max_messages, wait_seconds=wait_seconds, invisible_seconds=30)


def leased(received: list[Any]) -> list[str]:
    return [lease.receipt_handle for batch in received for lease in batch.leases]


async def test_phase_one_collects_over_brokers_up_to_max_messages() -> None:
    rx, brokers, _ = receiver(["a", "b", "c"])
    brokers.held.update(a=2, b=5, c=5)

    got = await rx.receive("g", "orders", asking(max_messages=6))

    assert len(leased(got)) == 6
    assert [(b, wanted) for b, wanted, _ in brokers.receives] == [("a", 6), ("b", 4)]
    assert all(wait == 0 for _, _, wait in brokers.receives)


async def test_phase_one_starts_at_a_rotating_broker() -> None:
    rx, brokers, _ = receiver(["a", "b", "c"])
    firsts = []
    for _ in range(3):
        brokers.receives.clear()
        await rx.receive("g", "orders", asking())
        firsts.append(brokers.receives[0][0])
    assert sorted(firsts) == ["a", "b", "c"]


async def test_one_broker_is_asked_once_with_the_wait() -> None:
    rx, brokers, _ = receiver(["a"])
    waiting = asyncio.create_task(rx.receive("g", "orders", asking(wait_seconds=10)))
    await settle()
    assert not waiting.done()

    await brokers.arrive("a")
    got = await asyncio.wait_for(waiting, 2)

    assert leased(got) == ["a-0"]
    assert len(brokers.receives) == 1  # no empty receive first: the broker answers at once or holds the call
    assert 9000 < brokers.receives[0][2] <= 10_000
    assert brokers.readies == []


async def test_several_brokers_wait_on_ready_and_receive_where_it_arrived() -> None:
    rx, brokers, _ = receiver(["a", "b", "c"])
    waiting = asyncio.create_task(rx.receive("g", "orders", asking(wait_seconds=10)))
    await settle()
    assert sorted(brokers.readies) == ["a", "b", "c"]

    await brokers.arrive("b", 2)
    got = await asyncio.wait_for(waiting, 2)

    assert leased(got) == ["b-0", "b-1"]
    assert brokers.receives[-1] == ("b", 10, 0)


async def test_a_raced_ready_keeps_waiting_until_something_is_left() -> None:
    rx, brokers, _ = receiver(["a", "b"])
    waiting = asyncio.create_task(rx.receive("g", "orders", asking(wait_seconds=10)))
    await settle()

    brokers.steal_next = True
    await brokers.arrive("a")
    await settle()
    assert not waiting.done(), "a receive that lost the race answered empty before its wait ended"

    await brokers.arrive("b")
    assert leased(await asyncio.wait_for(waiting, 2)) == ["b-0"]


async def test_an_empty_wait_ends_at_its_deadline() -> None:
    rx, _, _ = receiver(["a", "b"])
    loop = asyncio.get_running_loop()
    started = loop.time()

    assert await rx.receive("g", "orders", asking(wait_seconds=0.3)) == []
    assert 0.25 < loop.time() - started < 2


async def test_a_silent_broker_is_skipped() -> None:
    rx, brokers, _ = receiver(["a", "b"])
    brokers.failures["a"] = BrokerUnavailable("broker a at a:1 did not answer: refused", broker="a")
    brokers.held["b"] = 1

    for _ in range(2):  # whichever broker is asked first
        brokers.held["b"] = 1
        assert leased(await rx.receive("g", "orders", asking())) == ["b-0"]


async def test_group_not_found_only_when_every_broker_says_so() -> None:
    rx, brokers, _ = receiver(["a", "b"])
    brokers.failures["a"] = GroupNotFound("consumer group 'g' does not exist")
    brokers.held["b"] = 1
    assert leased(await rx.receive("g", "orders", asking())) == ["b-0"]

    brokers.failures["b"] = GroupNotFound("consumer group 'g' does not exist")
    with pytest.raises(GroupNotFound):
        await rx.receive("g", "orders", asking())

    brokers.failures["b"] = BrokerUnavailable("broker b did not answer", broker="b")
    with pytest.raises(BrokerUnavailable):
        await rx.receive("g", "orders", asking())


async def test_a_bad_request_is_raised_at_once() -> None:
    rx, brokers, _ = receiver(["a", "b"])
    brokers.failures.update(a=InvalidFilter("bad"), b=InvalidFilter("bad"))

    with pytest.raises(InvalidFilter):
        await rx.receive("g", "orders", asking())
    assert len(brokers.receives) == 1


async def test_with_every_long_poll_slot_taken_what_is_there_still_comes_back() -> None:
    from gateway.cluster.long_polls import LongPollGate
    from libs.errors import TooManyLongPolls

    rx, brokers, _ = receiver(["a"])
    brokers.long_polls = LongPollGate(0)  # every slot taken
    await brokers.arrive("a", 3)
    got = await rx.receive("g", "orders", asking(wait_seconds=10))
    assert leased(got) == ["a-0", "a-1", "a-2"]
    assert brokers.receives == [("a", 10, 0)]  # asked without a wait: nothing held the slot it could not have

    with pytest.raises(TooManyLongPolls):  # nothing there: the wait is refused, as before
        await rx.receive("g", "orders", asking(wait_seconds=10))
