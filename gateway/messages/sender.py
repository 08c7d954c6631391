"""Sender: turns outgoing messages into records and puts them on brokers.

A request's messages are encoded once (libs.codec) and grouped by the broker
chosen for each; puts to one broker are coalesced across concurrent requests
(libs.broker_api.coalescing). A broker that does not answer is avoided for a
while and its messages go to another broker (up to two retries), except
messages with a `message_group`, which must stay on their queue to stay in order.

Only a put that certainly stored nothing is sent again (RocketMQ's
retryAnotherBrokerWhenNotStoreOK, false by default): a flush timeout, a refusal
after the append (not-master, replication-timeout: the master lost its lease or
its slaves while the put waited) and a put that reached the broker but got no
answer are answered as they are, with `maybe_stored`, never sent elsewhere. A send with an
Idempotency-Key passes `Pins`: its messages keep their ids across retries, and
one that may already be on a broker goes to that broker only, which keeps one copy.
A put left waiting on a master that stopped answering is given up once the nameservers name
another master of its broker name (libs.broker_api.coalescing): a keyed send goes again, at
once, to the same queue of that broker name (its new master holds a replicated copy under
the same id, or none); a keyless one is answered `maybe_stored`.

The sender takes and answers plain values (records built by gateway.messages.records, `Sent`);
the routes convert from and to the public models.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any, Final, Protocol

from gateway.messages.producer import BrokerAvoidance, QueueSelector, QueueTarget, writable_queues
from gateway.messages.records import Prepared
from libs.broker_api.client import BrokerClient
from libs.broker_api.coalescing import STALL_RECHECK_S, MasterCheck, PutCoalescer, master_replaced, stored_entry
from libs.broker_api.route_cache import MasterDirectory, RouteCache
from libs.broker_api.schemas import PutEntry
from libs.broker_api.transaction_ids import transaction_id
from libs.codec import set_queue_id
from libs.errors import (
    BrokerUnavailable,
    FlushTimeout,
    NotMaster,
    PetrelError,
    PutQueueFull,
    TopicNotFound,
)
from libs.names import TRANS_HALF_TOPIC
from libs.routing import TopicRoute

SEND_RETRIES = 2
_NONE_TRIED: Final[set[str]] = set()
"""Read only: the brokers a message not yet retried was put to."""


class Pins(Protocol):
    """Where the messages of an idempotent send may already be, and the record of where they go next."""

    @property
    def fixed(self) -> Mapping[str, str]:
        """message id -> the broker an earlier attempt sent it to: it goes there again, nowhere else."""
        ...

    async def record(self, targets: Mapping[str, str]) -> None:
        """Note message id -> broker before the put goes out (raises when the send may not go on)."""
        ...


def unsettled(error: PetrelError) -> bool:
    """Might the message be stored despite this error? (then it must not be sent anywhere else)"""
    return isinstance(error, FlushTimeout) or bool(error.extensions.get("maybe_stored"))


@dataclass(slots=True)
class Sent:
    """Where a message was stored (the fields of the public SendResult, in its order). Not frozen: see
    gateway.messages.records.OutgoingMessage."""

    message_id: str
    topic: str
    broker: str
    queue_id: int
    queue_offset: int | None
    """None for a scheduled or half message, until it is delivered"""
    stored_at: int
    deliver_at: int | None = None
    warning: str | None = None
    half_offset: int | None = None
    """A half message's CommitLog offset, which its transaction id carries (not a SendResult field)."""

    def fields(self) -> dict[str, Any]:
        """SendResult's fields as plain data (dataclasses.asdict would copy each value, deeply)."""
        return {name: getattr(self, name) for name in _SENT_FIELDS}


_SENT_FIELDS: Final = tuple(f.name for f in dataclass_fields(Sent) if f.name != "half_offset")


class Sender:
    def __init__(self, routes: RouteCache, brokers: BrokerClient, masters: MasterDirectory | None = None) -> None:
        self.routes = routes
        self.brokers = brokers
        self.masters = masters
        """Who each broker name's master is now: a put stalled on a replaced master stops waiting (None: it waits)."""
        self.avoidance = BrokerAvoidance()
        self.selector = QueueSelector(self.avoidance)
        self._coalescers: dict[tuple[str, str], PutCoalescer] = {}

    async def send(self, topic: str, prepared: list[Prepared], pins: Pins | None = None) -> list[Sent | PetrelError]:
        """Put every prepared message; one result or error per message, in order."""
        results: list[Sent | PetrelError | None] = [None] * len(prepared)
        pending = list(range(len(prepared)))
        tried: dict[int, set[str]] = {}  # the brokers a message was put to and must not go to again
        bound: dict[int, QueueTarget] = {}  # the queue a keyed message goes to again: its master was replaced
        for attempt in range(SEND_RETRIES + 1):
            try:
                route = await self.routes.get(topic)
            except PetrelError:
                if attempt == 0:
                    raise
                break  # a retry that cannot be routed: the messages keep their last error (puts were made)
            by_target: dict[str, list[tuple[int, QueueTarget]]] = {}
            for i in pending:
                target = self._target(topic, route, prepared[i], tried.get(i, _NONE_TRIED), pins, bound.get(i))
                if isinstance(target, PetrelError):
                    results[i] = target
                else:
                    by_target.setdefault(target.broker, []).append((i, target))
            if pins is not None and by_target:
                await pins.record({prepared[i].message_id: t.broker for b in by_target.values() for i, t in b})
            outcomes = await self._put_all(route, prepared, list(by_target.values()))
            pending = []
            for batch, outcome in zip(by_target.values(), outcomes, strict=True):
                for (i, target), result in zip(batch, outcome, strict=True):
                    results[i] = result
                    if attempt < SEND_RETRIES and self._again(prepared[i], target, result, pins, tried, bound, i):
                        pending.append(i)
            if not pending:
                break
        return [r if r is not None else BrokerUnavailable("not sent") for r in results]

    def _target(
        self,
        topic: str,
        route: TopicRoute,
        prepared: Prepared,
        tried: set[str],
        pins: Pins | None,
        bound: QueueTarget | None = None,
    ) -> QueueTarget | PetrelError:
        """The queue a message goes to: any (the selector's choice), or one of the broker it is pinned to."""
        pinned = pins.fixed.get(prepared.message_id) if pins is not None else None
        if bound is not None:
            pinned = bound.broker
            for queue in writable_queues(route):
                if queue.broker == bound.broker and queue.queue_id == bound.queue_id:
                    return queue
        if pinned is None:
            try:
                return self.selector.select(topic, route, prepared.message.message_group, tried)
            except PetrelError as exc:  # no writable queue: this message's answer, not the whole request's
                return exc
        targets = [t for t in writable_queues(route) if t.broker == pinned]
        if not targets:
            self.routes.invalidate(topic)  # the next repeat asks the nameservers whether it is back
            return BrokerUnavailable(
                f"message {prepared.message_id} may be stored on broker {pinned}, which has no writable queue "
                f"of {topic!r} now; it is sent there again (and nowhere else) once it is back",
                broker=pinned,
                maybe_stored=True,
            )
        spread = prepared.message.message_group or prepared.message_id
        return targets[zlib.crc32(spread.encode()) % len(targets)]

    def _again(
        self,
        prepared: Prepared,
        target: QueueTarget,
        result: Sent | PetrelError,
        pins: Pins | None,
        tried: dict[int, set[str]],
        bound: dict[int, QueueTarget],
        i: int,
    ) -> bool:
        """Is message `i` put again? Noted in `tried` (not to that broker) or `bound` (to that queue only)."""
        if pins is not None and isinstance(result, PetrelError) and master_replaced(result):
            bound[i] = target  # same id, DEDUP: the new master answers with its copy, if it has one
            return True
        if self._may_retry(prepared, result, pins):
            tried.setdefault(i, set()).add(target.broker)
            return True
        return False

    @staticmethod
    def _may_retry(prepared: Prepared, result: Sent | PetrelError, pins: Pins | None) -> bool:
        """Retry on another broker only what certainly was not stored, and is not bound to its queue or broker."""
        if not isinstance(result, BrokerUnavailable) or unsettled(result):
            return False
        pinned = pins is not None and prepared.message_id in pins.fixed
        return prepared.message.message_group is None and not pinned

    async def send_half(self, topic: str, prepared: Prepared) -> Sent:
        """Put one half message (a transaction's first phase, marked TRAN_MSG) as sends go: coalesced, retried.

        The answer's queue is the one the message goes to when committed; it has no queue offset until then.
        """
        (result,) = await self.send(topic, [prepared])
        if isinstance(result, PetrelError):
            raise result
        return result

    def _coalescer(self, target: QueueTarget) -> PutCoalescer:
        key = (target.broker, target.address)
        coalescer = self._coalescers.get(key)
        if coalescer is None or coalescer.was_replaced:
            address, broker = target.address, target.broker
            coalescer = PutCoalescer(
                lambda records: self.brokers.put(broker, address, records),
                broker=broker,
                replaced=self._replaced_check(broker, address),
            )
            self._coalescers[key] = coalescer
        return coalescer

    def _replaced_check(self, broker: str, address: str) -> MasterCheck | None:
        masters = self.masters
        if masters is None:
            return None

        async def replaced() -> bool:
            now = (await masters.lookup([broker], max_age_s=STALL_RECHECK_S)).get(broker)
            if now is None or now == address:
                return False
            self.routes.invalidate_broker(broker)  # every topic's route naming the old master
            return True

        return replaced

    async def _put_all(
        self, route: TopicRoute, prepared: list[Prepared], batches: list[list[tuple[int, QueueTarget]]]
    ) -> list[list[Sent | PetrelError]]:
        """Each broker's batch put at once; one broker's (nearly every send) without a task of its own."""
        if len(batches) == 1:
            return [await self._put(route, prepared, batches[0])]
        return await asyncio.gather(*(self._put(route, prepared, batch) for batch in batches))

    async def _put(
        self, route: TopicRoute, prepared: list[Prepared], batch: list[tuple[int, QueueTarget]]
    ) -> list[Sent | PetrelError]:
        target = batch[0][1]
        body = bytearray()
        for i, t in batch:
            start = len(body)
            body += prepared[i].encoded
            set_queue_id(body, start, t.queue_id)
        outcome = await self._coalescer(target).submit(bytes(body), len(batch))
        results: list[Sent | PetrelError] = []
        for (i, t), stored in zip(batch, outcome, strict=True):
            if isinstance(stored, PetrelError):
                entry = stored_entry(stored)
                if entry is None:
                    results.append(self._failed(route, target, stored))
                    continue
                results.append(self._maybe_stored(route, prepared[i], t, stored, entry))
                continue
            self.avoidance.succeeded(target.broker)
            results.append(self._result(route, prepared[i], t, stored))
        return results

    def _maybe_stored(
        self, route: TopicRoute, prepared: Prepared, target: QueueTarget, error: PetrelError, entry: PutEntry
    ) -> PetrelError:
        """A record appended, then not confirmed or refused: the same problem, saying where it may be stored."""
        self.avoidance.failed(target.broker)  # a slow disk, a master replaced: other messages go elsewhere a while
        if isinstance(error, NotMaster):
            self.routes.invalidate(route.topic)
        sent = self._result(route, prepared, target, entry)
        where = sent.fields() | {"maybe_stored": True}
        if sent.half_offset is not None:  # so that the transaction can be ended all the same
            where["transaction_id"] = transaction_id(sent.broker, sent.message_id, sent.half_offset)
        return type(error).rebuild(f"{error.detail} (message {where['message_id']})", where)

    @staticmethod
    def _result(route: TopicRoute, prepared: Prepared, target: QueueTarget, stored: PutEntry) -> Sent:
        half = stored.topic == TRANS_HALF_TOPIC
        scheduled = stored.deliver_at is not None or half  # kept back for now
        return Sent(
            message_id=prepared.message_id,
            topic=route.topic,
            broker=target.broker,
            queue_id=target.queue_id if scheduled else stored.queue_id,
            queue_offset=None if scheduled else stored.queue_offset,
            stored_at=stored.store_timestamp,
            deliver_at=stored.deliver_at,
            warning=prepared.warning,
            half_offset=stored.physical_offset if half else None,
        )

    def _failed(self, route: TopicRoute, target: QueueTarget, error: PetrelError) -> PetrelError:
        if unsettled(error):  # may be stored there: answered as it is, never turned into a reason to send again
            self.avoidance.failed(target.broker)
            self.routes.invalidate(route.topic)
        elif isinstance(error, BrokerUnavailable):
            self.avoidance.failed(target.broker)
            if not isinstance(error, PutQueueFull):  # (that one is this gateway's own queue: the route is right)
                self.routes.invalidate(route.topic)  # its master may have been replaced (a failover): ask again
        elif isinstance(error, NotMaster):  # a fenced or demoted master refused it before storing anything
            self.routes.invalidate(route.topic)
            return BrokerUnavailable(f"broker {target.broker}'s master has changed; send again: {error.detail}")
        elif isinstance(error, TopicNotFound):
            self.routes.invalidate(route.topic)  # the route was stale
            return BrokerUnavailable(f"broker {target.broker} no longer holds the topic: {error.detail}")
        return error
