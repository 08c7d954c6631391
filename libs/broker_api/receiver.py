"""Receiver: a consumer group's receive over every broker that holds the topic, with long polling.

With one broker, a receive that may wait is one call that the broker answers at
once with what is there, or holds until a message arrives. With several, phase 1
asks the brokers one after another, none of them waiting, until
`max_messages` are leased; the first broker asked rotates from call to call so
that no broker's queues are always drained first. Phase 2, when phase 1 found
nothing and the consumer is willing to wait: each broker's `/ready` is held at
once, and the first that says a message is there is asked for it without waiting.
Another consumer may take it first; then the wait goes on until its deadline.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from typing import Any, Final

from libs.broker_api.client import BrokerClient
from libs.broker_api.fanout import cancel_all, failure_of_all
from libs.broker_api.frames import Lease
from libs.broker_api.route_cache import RouteCache
from libs.errors import NotFound, PetrelError, ServiceUnavailable, TooManyLongPolls, TopicNotFound
from libs.http.disconnect import unless_gone
from libs.routing import TopicRoute
from libs.topic import Perm

log = logging.getLogger(__name__)

RACE_BACKOFF: Final = 0.02
"""After a broker said ready and then had nothing (another consumer took it), wait this long before asking again."""

READY_RETRY_MAX: Final = 2.0
"""A broker that did not answer a long poll's /ready is asked again after 0.04 s, doubled each time up to this."""

Target = tuple[str, str]
"""(broker name, master address)"""


@dataclass(frozen=True, slots=True)
class Receive:
    """What a consumer asks for: up to `max_messages`, waiting `wait_seconds`, leased `invisible_seconds`."""

    max_messages: int
    wait_seconds: float
    invisible_seconds: int
    filter_type: str | None = None
    """TAG or SQL92, with `expression`; None: every message"""
    expression: str | None = None
    client_id: str | None = None


@dataclass(frozen=True, slots=True)
class Received:
    """What one broker leased: one record (libs.codec, end to end) per lease, in order."""

    broker: str
    leases: list[Lease]
    records: memoryview


class Receiver:
    def __init__(self, routes: RouteCache, brokers: BrokerClient) -> None:
        self.routes = routes
        self.brokers = brokers
        self._rotation = itertools.count()

    async def receive(
        self, group: str, topic: str, request: Receive, gone: asyncio.Future[None] | None = None
    ) -> list[Received]:
        """Up to request.max_messages leased messages of the topic, from one broker or several.

        `gone` (libs.http.disconnect): the consumer left; the wait ends, its calls to the brokers closed.
        """
        targets = readable_brokers(await self.routes.get(topic))
        body = _receive_body(request)
        if len(targets) == 1 and request.wait_seconds > 0:
            try:
                return await self._hold_on_one(group, topic, targets[0], body, request.wait_seconds, gone)
            except TooManyLongPolls:
                pass  # every long-poll slot is taken: what is there now still comes back (phase 1 below)
        received, answered = await self._sweep(group, topic, targets, body, request.max_messages)
        if received or request.wait_seconds <= 0 or not answered:
            return received
        with self.brokers.long_polls.hold():
            deadline = asyncio.get_running_loop().time() + request.wait_seconds
            if len(answered) == 1:
                waiting = self._wait_on_one(group, topic, answered[0], body, deadline)
            else:
                waiting = self._wait_on_several(group, topic, answered, body, deadline)
            if gone is None:
                return await waiting
            return await unless_gone(gone, waiting) or []

    async def _hold_on_one(
        self,
        group: str,
        topic: str,
        target: Target,
        body: dict[str, Any],
        wait_seconds: float,
        gone: asyncio.Future[None] | None,
    ) -> list[Received]:
        """One broker: phases 1 and 2 in one call, answered at once with what is there or held until one comes
        (a long poll's receive was two calls, the first nearly always empty at a steady trickle)."""
        with self.brokers.long_polls.hold():
            deadline = asyncio.get_running_loop().time() + wait_seconds
            waiting = self._wait_on_one(group, topic, target, body, deadline)
            try:
                return await waiting if gone is None else await unless_gone(gone, waiting) or []
            except TopicNotFound:
                self.routes.invalidate(topic)
                raise

    async def _sweep(
        self, group: str, topic: str, targets: list[Target], body: dict[str, Any], wanted: int
    ) -> tuple[list[Received], list[Target]]:
        """Phase 1: (what the brokers leased, the brokers that answered)."""
        start = next(self._rotation) % len(targets)
        received: list[Received] = []
        answered: list[Target] = []
        failures: list[PetrelError] = []
        for name, address in targets[start:] + targets[:start]:
            count = sum(len(r.leases) for r in received)
            if count >= wanted:
                break
            try:
                got = await self._receive_now(group, topic, (name, address), body, wanted - count)
            except (NotFound, ServiceUnavailable) as exc:
                # This broker cannot serve the receive; the others may (a 400 is the same everywhere: raised).
                failures.append(exc)
                if isinstance(exc, TopicNotFound):
                    self.routes.invalidate(topic)
                continue
            answered.append((name, address))
            if got is not None:
                received.append(got)
        if not received and not answered:
            raise failure_of_all(failures)
        return received, answered

    async def _receive_now(
        self, group: str, topic: str, target: Target, body: dict[str, Any], wanted: int | None = None
    ) -> Received | None:
        name, address = target
        call = {**body, "wait_ms": 0} if wanted is None else {**body, "wait_ms": 0, "max_messages": wanted}
        leases, records = await self.brokers.receive(name, address, group, topic, call)
        return Received(name, leases, records) if leases else None

    async def _wait_on_one(
        self, group: str, topic: str, target: Target, body: dict[str, Any], deadline: float
    ) -> list[Received]:
        name, address = target
        leases, records = await self.brokers.receive(
            name, address, group, topic, {**body, "wait_ms": _ms_until(deadline)}
        )
        return [Received(name, leases, records)] if leases else []

    async def _wait_on_several(
        self, group: str, topic: str, targets: list[Target], body: dict[str, Any], deadline: float
    ) -> list[Received]:
        waiting = {self._ready(group, topic, t, body, deadline): t for t in targets}
        failures: dict[Target, int] = {}
        try:
            while waiting:
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    target = waiting.pop(task)
                    if task.exception() is not None:
                        # A broker that did not answer in time (a busy machine, a restart) is asked again, later
                        # each time, until the deadline: the consumer's wait does not end early because of it.
                        failures[target] = failures.get(target, 0) + 1
                        log.info(
                            "broker %s did not answer the long poll of %s/%s: %s",
                            target[0],
                            group,
                            topic,
                            task.exception(),
                        )
                        again = min(READY_RETRY_MAX, RACE_BACKOFF * 2 ** failures[target])
                        if _ms_until(deadline) > again * 1000:
                            waiting[self._ready(group, topic, target, body, deadline, again)] = target
                        continue
                    if not task.result():
                        continue  # the broker's wait ended with nothing to receive
                    got = await self._receive_ready(group, topic, target, body)
                    if got is not None:
                        return [got]
                    if _ms_until(deadline) > 0:
                        waiting[self._ready(group, topic, target, body, deadline, RACE_BACKOFF)] = target
            return []
        finally:
            await cancel_all(waiting)

    async def _receive_ready(self, group: str, topic: str, target: Target, body: dict[str, Any]) -> Received | None:
        try:
            return await self._receive_now(group, topic, target, body)
        except ServiceUnavailable:
            return None  # gone since it said ready: the other brokers are still waited on

    def _ready(
        self, group: str, topic: str, target: Target, body: dict[str, Any], deadline: float, after: float = 0.0
    ) -> asyncio.Task[bool]:
        async def ready() -> bool:
            if after:
                await asyncio.sleep(after)
            params = _ready_params(body, _ms_until(deadline))
            return await self.brokers.ready(target[0], target[1], group, topic, params)

        return asyncio.create_task(ready())


def readable_brokers(route: TopicRoute) -> list[Target]:
    """The brokers with readable queues of the topic and a live master."""
    readable = [q.broker_name for q in route.queues if q.perm & Perm.READ and q.read_queues > 0]
    if not readable:
        raise TopicNotFound(f"topic {route.topic!r} has no readable queue")
    targets = []
    for name in readable:
        broker = route.broker(name)
        if broker is not None and broker.master is not None:
            targets.append((name, broker.master))
    if not targets:
        raise ServiceUnavailable(f"no broker holding topic {route.topic!r} has a live master", brokers=readable)
    return targets


def _receive_body(request: Receive) -> dict[str, Any]:
    return {
        "max_messages": request.max_messages,
        "invisible_ms": request.invisible_seconds * 1000,
        "wait_ms": 0,
        "filter_type": request.filter_type,
        "expression": request.expression,
        "client_id": request.client_id,
    }


def _ready_params(body: dict[str, Any], wait_ms: int) -> dict[str, str | int]:
    params: dict[str, str | int] = {"wait_ms": wait_ms}
    for name in ("client_id", "filter_type", "expression"):
        if body[name] is not None:
            params[name] = body[name]
    return params


def _ms_until(deadline: float) -> int:
    return max(0, int((deadline - asyncio.get_running_loop().time()) * 1000))
