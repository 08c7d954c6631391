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

The sender takes and answers plain values (`OutgoingMessage`, `Sent`); the routes
convert from and to the public models.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any, Final, Protocol

from gateway.messages.producer import BrokerAvoidance, QueueSelector, QueueTarget, writable_queues
from libs.broker_api.client import BrokerClient
from libs.broker_api.coalescing import PutCoalescer, stored_entry
from libs.broker_api.route_cache import RouteCache
from libs.broker_api.schemas import PutEntry
from libs.broker_api.transaction_ids import transaction_id
from libs.codec import MAX_BODY_SIZE, encode_record, set_queue_id
from libs.errors import (
    BrokerUnavailable,
    FlushTimeout,
    InvalidMessage,
    NotMaster,
    PayloadTooLarge,
    PetrelError,
    PutQueueFull,
    TopicNotFound,
)
from libs.message import KEY_SEPARATOR, SYSTEM_PROPERTIES, MessageIdFactory, MessageRecord, Prop, SysFlag
from libs.names import TRANS_HALF_TOPIC
from libs.routing import TopicRoute
from libs.timeparse import parse_time_ms

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


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """A message to send, as its producer gave it: exactly one of `body` (text) or `body_base64` (bytes)."""

    body: str | None = None
    body_base64: str | None = None
    tag: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    message_group: str | None = None
    delay_level: int | None = None
    delay_ms: int | None = None
    deliver_at: str | int | None = None


@dataclass(frozen=True, slots=True)
class Sent:
    """Where a message was stored (the fields of the public SendResult, in its order)."""

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


@dataclass(frozen=True, slots=True)
class Prepared:
    message_id: str
    message: OutgoingMessage
    encoded: bytes
    """The record in the binary codec; its queue id is set when the queue is chosen."""
    warning: str | None = None


class Sender:
    def __init__(
        self,
        routes: RouteCache,
        brokers: BrokerClient,
        born_host: str,
        delay_levels: int = 18,
        max_delay_ms: int = 30 * 86_400_000,
        clock: Callable[[], float] = time.time,
        max_message_bytes: int = MAX_BODY_SIZE,
    ) -> None:
        self.clock = clock
        self.max_message_bytes = max_message_bytes
        """The largest message body (decoded); at most the codec's MAX_BODY_SIZE."""
        """The wall clock (seconds): born timestamps and delivery times are measured on it."""
        self.delay_levels = delay_levels
        self.max_delay_ms = max_delay_ms
        self.routes = routes
        self.brokers = brokers
        self.born_host = born_host
        self.avoidance = BrokerAvoidance()
        self.selector = QueueSelector(self.avoidance)
        self.ids = MessageIdFactory()
        self._coalescers: dict[tuple[str, str], PutCoalescer] = {}

    def prepare(
        self,
        topic: str,
        message: OutgoingMessage,
        system: Mapping[str, str] | None = None,
        message_id: str | None = None,
    ) -> Prepared:
        """Validate and build the record; InvalidMessage / PayloadTooLarge say what is wrong.

        `system`: system properties the gateway adds (a transaction's producer group, ...).
        `message_id`: an id fixed by an Idempotency-Key: the record is marked DEDUP, so that
        a broker holding a copy with this id answers with it rather than storing another.
        """
        body, binary = _body(message, self.max_message_bytes)
        properties = dict(message.properties)
        if properties:
            reserved = sorted(properties.keys() & SYSTEM_PROPERTIES)
            if reserved:
                raise InvalidMessage(f"property name(s) {', '.join(reserved)} are reserved for Petrel")
        if system:
            properties.update(system)
        if message_id is not None:
            properties[Prop.DEDUP] = "true"
        message_id = message_id or self.ids.new_id()
        properties[Prop.UNIQ_KEY] = message_id
        if message.tag is not None:
            properties[Prop.TAGS] = _tag(message.tag)
        if message.keys:
            properties[Prop.KEYS] = KEY_SEPARATOR.join(_key(k) for k in message.keys)
        if message.message_group is not None:
            properties[Prop.MESSAGE_GROUP] = message.message_group
        now = int(self.clock() * 1000)
        delayed = message.delay_level is not None or message.delay_ms is not None or message.deliver_at is not None
        warning = self._schedule(message, properties, now) if delayed else None
        record = MessageRecord(
            topic=topic,
            body=body,
            properties=properties,
            sysflag=SysFlag.BINARY_BODY if binary else 0,
            born_timestamp=now,
            born_host=self.born_host,
        )
        return Prepared(message_id, message, encode_record(record), warning)

    def _schedule(self, message: OutgoingMessage, properties: dict[str, str], now: int) -> str | None:
        """Set the scheduling property a delay field asks for; a warning for a time already past."""
        given = [f for f in ("delay_level", "delay_ms", "deliver_at") if getattr(message, f) is not None]
        if len(given) > 1:
            raise InvalidMessage(f"give at most one of delay_level, delay_ms and deliver_at, not {' and '.join(given)}")
        if message.delay_level is not None:
            if not 1 <= message.delay_level <= self.delay_levels:
                raise InvalidMessage(f"delay_level {message.delay_level} is not between 1 and {self.delay_levels}")
            properties[Prop.DELAY_LEVEL] = str(message.delay_level)
            return None
        if message.delay_ms is not None:
            due = now + message.delay_ms
        elif message.deliver_at is not None:
            due = parse_time_ms(message.deliver_at, "deliver_at")
        else:
            return None
        if due - now > self.max_delay_ms:
            raise InvalidMessage(
                f"the delivery time is {(due - now) / 86_400_000:.1f} days away; the limit is "
                f"{self.max_delay_ms / 86_400_000:g} days"
            )
        if due <= now:
            return None if message.delay_ms is not None else "deliver_at is in the past: the message is delivered now"
        properties[Prop.TIMER_DELIVER_MS] = str(due)
        return None

    async def send(self, topic: str, prepared: list[Prepared], pins: Pins | None = None) -> list[Sent | PetrelError]:
        """Put every prepared message; one result or error per message, in order."""
        results: list[Sent | PetrelError | None] = [None] * len(prepared)
        pending = list(range(len(prepared)))
        tried: dict[int, set[str]] = {}  # the brokers a message was put to and must not go to again
        for attempt in range(SEND_RETRIES + 1):
            try:
                route = await self.routes.get(topic)
            except PetrelError:
                if attempt == 0:
                    raise
                break  # a retry that cannot be routed: the messages keep their last error (puts were made)
            by_target: dict[str, list[tuple[int, QueueTarget]]] = {}
            for i in pending:
                target = self._target(topic, route, prepared[i], tried.get(i, _NONE_TRIED), pins)
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
                    if self._may_retry(prepared[i], result, pins) and attempt < SEND_RETRIES:
                        tried.setdefault(i, set()).add(target.broker)
                        pending.append(i)
            if not pending:
                break
        return [r if r is not None else BrokerUnavailable("not sent") for r in results]

    def _target(
        self, topic: str, route: TopicRoute, prepared: Prepared, tried: set[str], pins: Pins | None
    ) -> QueueTarget | PetrelError:
        """The queue a message goes to: any (the selector's choice), or one of the broker it is pinned to."""
        pinned = pins.fixed.get(prepared.message_id) if pins is not None else None
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
        if coalescer is None:
            address, broker = target.address, target.broker
            coalescer = PutCoalescer(lambda records: self.brokers.put(broker, address, records), broker=broker)
            self._coalescers[key] = coalescer
        return coalescer

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


def _body(message: OutgoingMessage, limit: int) -> tuple[bytes, bool]:
    if (message.body is None) == (message.body_base64 is None):
        raise InvalidMessage("give exactly one of body (text) or body_base64")
    if message.body is not None:
        body = message.body.encode()
        binary = False
    else:
        try:
            body = base64.b64decode(message.body_base64 or "", validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidMessage(f"body_base64 is not valid base64: {exc}") from exc
        binary = True
    if len(body) > limit:
        raise PayloadTooLarge(
            f"the message body is {len(body)} bytes; the limit is {limit} (max_message_bytes)", limit=limit
        )
    return body, binary


def _tag(tag: str) -> str:
    if not tag or "||" in tag or tag.strip() != tag or tag == "*":
        raise InvalidMessage(f"tag {tag!r} is invalid: no '||', no surrounding spaces, not '*'")
    return tag


def _key(key: str) -> str:
    if not key or KEY_SEPARATOR in key:
        raise InvalidMessage(f"key {key!r} is invalid: keys are non-empty and have no spaces")
    return key
