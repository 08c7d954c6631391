"""PopService: receive under a lease (RocketMQ's POP), on the queues of a topic and the group's retry queue.

A receive looks at the topic's queues and the group's retry queue for this topic,
starting at a rotating queue so no queue starves (the retry queue with no filter:
a retry is delivered whatever filter the group uses now), and leases up to
`max_messages` messages: each leaves the window's cursor and waits in flight
until it is acked, nacked, or its lease runs out (`services.broker.consume.settle`).
A FIFO group takes at most one message per queue and none from a queue whose
message is leased or suspended. With a wait, an empty receive is held until a
dispatch (or a lease given back) wakes it.

A filter that matches little makes a receive read many units for few messages: one
receive reads at most `scan_budget.max_steps` units (then answers what it leased, perhaps
nothing, at once; the window's cursor keeps its place for the next), and lets the event
loop run after each slice of `scan_budget.slice_seconds`. Each slice is read and leased in
one synchronous step, so two receives of a group never read the same cursor.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

from libs.broker_api.frames import Lease
from libs.broker_api.groups import ConsumeFrom, GroupConfig
from libs.codec import peek_offsets, peek_property, peek_reconsume_times
from libs.errors import AlreadyAcked, InvalidRequest, LeaseEnded, OffsetOutOfRange
from libs.events.writer import EventWriter
from libs.filters import FilterType, MessageFilter
from libs.message import Prop
from libs.names import dlq_topic, retry_topic
from libs.receipt import ReceiptHandle, ReceiptKey
from libs.store.budget import ScanBudget, Spending
from libs.store.message_store import MessageStore
from libs.store.queue_scan import MAX_UNITS_SCANNED, QueueScan
from libs.topic import Perm, TopicConfig
from services.broker.consume.clients import DEFAULT_IDLE_MS, BroadcastClients
from services.broker.consume.ended_leases import EndedLeases
from services.broker.consume.groups import GroupTable
from services.broker.consume.window import ConsumeWindow, InFlight, WindowKey
from services.broker.long_polling import PullWaiters
from services.broker.offsets import ConsumerOffsets
from services.broker.topics import TopicTable

DEFAULT_SCAN_BUDGET = ScanBudget(MAX_UNITS_SCANNED)
COMPACT_TIMERS_FROM = 1024
"""Timers of leases that ended early (acked, nacked, renewed) are dropped once they are half the heap, past this."""


@dataclass(frozen=True, slots=True)
class Receive:
    group: str
    topic: str
    max_messages: int
    invisible_ms: int
    wait_ms: int = 0
    filter_type: FilterType = FilterType.TAG
    expression: str = "*"
    message_filter: MessageFilter | None = None
    client_id: str = ""


@dataclass(frozen=True, slots=True)
class Timer:
    """A lease that runs out (`lease` > 0), or a FIFO suspension that ends (`lease` == 0)."""

    due: int
    seq: int
    key: WindowKey
    offset: int
    lease: int


def owner_of(group: str, client_id: str) -> str:
    return f"{group}@{client_id}" if client_id else group


class PopService:
    def __init__(
        self,
        *,
        broker: str,
        topics: TopicTable,
        groups: GroupTable,
        store: MessageStore,
        offsets: ConsumerOffsets,
        waiters: PullWaiters,
        events: EventWriter,
        receipt_key: bytes,
        delay_levels: tuple[int, ...],
        clock: Callable[[], float] = time.time,
        client_idle_ms: int = DEFAULT_IDLE_MS,
        scan_budget: ScanBudget = DEFAULT_SCAN_BUDGET,
    ) -> None:
        self.broker = broker
        self.topics = topics
        self.groups = groups
        self.store = store
        self.offsets = offsets
        self.waiters = waiters
        self.events = events
        self.receipt_key = receipt_key
        self.signing_key = ReceiptKey(receipt_key)
        self.delay_levels = delay_levels
        self.clock = clock
        self.scan_budget = scan_budget
        self.epoch = self.now_ms()
        self.windows: dict[WindowKey, ConsumeWindow] = {}
        self.inherited_attempts: dict[tuple[str, str, int], dict[int, int]] = {}
        """In-place attempt counts copied from the master this broker was a slave of: its windows start with them."""
        self.timers: list[tuple[int, int, Timer]] = []
        self._stale_timers = 0
        """Leases ended since the heap was last compacted: about how many timers are dead."""
        self.clients = BroadcastClients(client_idle_ms)
        self.ended = EndedLeases()
        self._lease_ids = itertools.count(1)
        self._seq = itertools.count()
        self._rotation: dict[tuple[str, str], int] = {}

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def next_lease(self) -> int:
        return next(self._lease_ids)

    # ---- receiving -------------------------------------------------------------------------

    async def receive(
        self, request: Receive, gone: asyncio.Future[None] | None = None
    ) -> tuple[list[Lease], list[bytes]]:
        """Lease what is there; with a wait, held until something comes. Nothing is leased once the client is `gone`."""
        config, sources = await self._sources(request)
        deadline = self.now_ms() + request.wait_ms
        while True:
            if gone is not None and gone.done():
                return [], []
            spending = self.scan_budget.start()
            leases, records = await self._pop(config, request, sources, spending)
            remaining = deadline - self.now_ms()
            if leases or remaining <= 0 or spending.exhausted:
                return leases, records
            woken = await self._wait(request, sources, remaining, sources[0].owner, gone)
            if woken and gone is not None and gone.done():
                for key in sources:  # the group's one wake fell on a client gone: wake the others
                    self.waiters.notify(key.topic, key.queue_id)

    async def ready(self, request: Receive, gone: asyncio.Future[None] | None = None) -> bool:
        """True as soon as a receive would find something (nothing is leased)."""
        config, sources = await self._sources(request)
        deadline = self.now_ms() + request.wait_ms
        while True:
            if any(self._has_work(config, key) for key in sources):
                return True
            remaining = deadline - self.now_ms()
            if remaining <= 0 or (gone is not None and gone.done()):
                return False
            await self._wait(request, sources, remaining, gone=gone)

    async def _wait(
        self,
        request: Receive,
        sources: list[WindowKey],
        remaining_ms: int,
        group: str | None = None,
        gone: asyncio.Future[None] | None = None,
    ) -> bool:
        """Hold until a message arrives that a source would give: any message at all of the retry queue."""
        filtered = [(k.topic, k.queue_id) for k in sources if self.filter_of(k, request) is not None]
        everything = [(k.topic, k.queue_id) for k in sources if self.filter_of(k, request) is None]
        return await self.waiters.wait_any(
            filtered, request.message_filter, remaining_ms / 1000, group, unfiltered=everything, gone=gone
        )

    @staticmethod
    def filter_of(key: WindowKey, request: Receive) -> MessageFilter | None:
        """The filter a source is read with. The group's retry queue is read with none (seed 002:
        copySubscription subscribes %RETRY%group with SUB_ALL): a message failed under one filter
        is retried even after the group changed its filter, never skipped by the new one."""
        return None if key.topic == retry_topic(request.group) else request.message_filter

    async def _sources(self, request: Receive) -> tuple[GroupConfig, list[WindowKey]]:
        config = self.groups.get(request.group)
        topic = self.topics.get(request.topic)
        if config.broadcast and not request.client_id:
            raise InvalidRequest(f"group {config.name!r} is a broadcast group: each receive names its client_id")
        client_id = request.client_id if config.broadcast else ""
        subscription = await self.groups.subscribe(config.name, topic.name, request.filter_type, request.expression)
        owner = owner_of(config.name, client_id)
        if client_id:
            self.clients.seen(owner, self.now_ms())
        sources = [WindowKey(owner, topic.name, q) for q in range(topic.read_queues)]
        if not config.broadcast:  # FIFO groups read it too: redriven dead letters arrive there
            queues = max(s.retry_queue_id for s in self.groups.subscriptions(config.name)) + 1
            await self.ensure_topic(retry_topic(config.name), queues)
            sources.append(WindowKey(owner, retry_topic(config.name), subscription.retry_queue_id))
        return config, sources

    async def ensure_topic(self, name: str, queues: int) -> None:
        current = self.topics.find(name)
        if current is None or current.write_queues < queues:
            await self.topics.put(TopicConfig(name, queues, queues, Perm.READ_WRITE))

    async def ensure_dlq(self, group: str) -> str:
        name = dlq_topic(group)
        await self.ensure_topic(name, 1)
        return name

    async def _pop(
        self, config: GroupConfig, request: Receive, sources: list[WindowKey], spending: Spending
    ) -> tuple[list[Lease], list[bytes]]:
        turn = (sources[0].owner, request.topic)
        start = self._rotation.get(turn, 0) % len(sources)
        self._rotation[turn] = start + 1
        leases: list[Lease] = []
        records: list[bytes] = []
        delivered: list[dict[str, object]] = []
        try:
            for key in sources[start:] + sources[:start]:
                taken_here = 0
                while not spending.exhausted:
                    need = 1 - taken_here if config.fifo else request.max_messages - len(leases)
                    window = self.window(key, config)
                    if need <= 0 or (config.fifo and window.blocked(self.now_ms())):
                        break
                    taken, finished = self._take(window, need, self.filter_of(key, request), spending)
                    now = self.now_ms()
                    for raw in taken:
                        leases.append(self._lease(window, config, raw, now, request.invisible_ms, delivered))
                        records.append(raw)
                    self.commit(window)
                    taken_here += len(taken)
                    if finished:
                        break
                    await spending.turn()  # the slice is over: the window is read afresh after it
        finally:  # what was leased was delivered, even when the receive is cancelled between two slices
            self._emit_delivered(config, sources[0].owner, delivered)
        return leases, records

    def _emit_delivered(self, config: GroupConfig, owner: str, delivered: list[dict[str, object]]) -> None:
        """One `delivered` line for the receive: the broker, group (and client id) once, each message's own fields."""
        client_id = owner.partition("@")[2]
        if client_id:
            self.events.emit_batch("delivered", delivered, broker=self.broker, group=config.name, client_id=client_id)
        else:
            self.events.emit_batch("delivered", delivered, broker=self.broker, group=config.name)

    def _take(
        self, window: ConsumeWindow, need: int, message_filter: MessageFilter | None, spending: Spending
    ) -> tuple[list[bytes], bool]:
        """Up to `need` records for the window, read until the slice ends; and whether the window is read out."""
        taken: list[bytes] = []
        key = window.key
        while len(taken) < need and window.returned:
            offset = window.take_returned()
            assert offset is not None
            raw = self._read_at(key, offset)
            if raw is not None:
                taken.append(raw)
        if len(taken) < need:
            low, high = self.store.queue_offsets(key.topic, key.queue_id)
            window.cursor = min(max(window.cursor, low), high)
            if window.cursor < high:
                where = (key.topic, key.queue_id)
                scan = QueueScan(
                    self.store, where, window.cursor, need - len(taken), message_filter, spending.steps_left
                )
                finished = scan.step(spending.slice_end)
                spending.spend(scan.scanned)
                window.cursor = scan.position
                taken.extend(scan.records)
                return taken, finished
        return taken, True

    def _read_at(self, key: WindowKey, offset: int) -> bytes | None:
        """The record at exactly `offset`, or None when retention deleted it."""
        try:
            result = self.store.pull(key.topic, key.queue_id, offset, 1)
        except OffsetOutOfRange:
            return None
        if not result.records or peek_offsets(result.records[0])[0] != offset:
            return None
        return result.records[0]

    def _has_work(self, config: GroupConfig, key: WindowKey) -> bool:
        window = self.window(key, config)
        if config.fifo and window.blocked(self.now_ms()):
            return False
        return bool(window.returned) or window.cursor < self.store.queue_offsets(key.topic, key.queue_id)[1]

    def _lease(
        self,
        window: ConsumeWindow,
        config: GroupConfig,
        raw: bytes,
        now: int,
        invisible_ms: int,
        delivered: list[dict[str, object]],
    ) -> Lease:
        """Lease `raw` and add its `delivered` event's own fields to `delivered`."""
        offset, physical = peek_offsets(raw)
        attempt = peek_reconsume_times(raw) + window.in_place_attempts.get(offset, 0) + 1
        message_id = peek_property(raw, Prop.UNIQ_KEY)
        lease_id = self.next_lease()
        expires = now + invisible_ms
        window.in_flight[offset] = InFlight(offset, lease_id, expires, attempt, physical, len(raw), message_id)
        self.add_timer(expires, window.key, offset, lease_id)
        key = window.key
        client_id = key.owner.partition("@")[2]
        handle = ReceiptHandle(
            self.broker, config.name, client_id, key.topic, key.queue_id, offset, lease_id, self.epoch, expires
        )
        delivered.append(
            {
                "message_id": message_id,
                "topic": key.topic,
                "queue_id": key.queue_id,
                "queue_offset": offset,
                "delivery_attempt": attempt,
            }
        )
        return Lease(handle.encode(self.signing_key), attempt, expires)

    # ---- windows, timers, offsets ----------------------------------------------------------

    def window(self, key: WindowKey, config: GroupConfig) -> ConsumeWindow:
        window = self.windows.get(key)
        if window is None:
            low, high = self.store.queue_offsets(key.topic, key.queue_id)
            start = self.offsets.get(key.owner, key.topic, key.queue_id)
            if start is None:
                from_last = config.consume_from is ConsumeFrom.LAST and key.topic != retry_topic(config.name)
                start = high if from_last else low
            window = self.windows[key] = ConsumeWindow(key, min(max(start, low), high))
            inherited = self.inherited_attempts.pop((key.owner, key.topic, key.queue_id), {})
            window.in_place_attempts.update({o: n for o, n in inherited.items() if o >= window.cursor})
            self.commit(window)
        return window

    def commit(self, window: ConsumeWindow) -> None:
        key = window.key
        self.offsets.commit(key.owner, key.topic, key.queue_id, window.committed)

    def add_timer(self, due: int, key: WindowKey, offset: int, lease: int) -> None:
        seq = next(self._seq)
        heapq.heappush(self.timers, (due, seq, Timer(due, seq, key, offset, lease)))

    def due_timers(self) -> list[Timer]:
        now = self.now_ms()
        due: list[Timer] = []
        while self.timers and self.timers[0][0] <= now:
            due.append(heapq.heappop(self.timers)[2])
        return due

    def end_lease(self, lease: int, kind: type[LeaseEnded] = AlreadyAcked, detail: str = "") -> None:
        """The lease is over (acked unless told otherwise): a late call with its handle is told why."""
        self.ended.end(lease, kind, detail)
        self._stale_timers += 1
        if self._stale_timers * 2 > len(self.timers) > COMPACT_TIMERS_FROM:
            self._compact_timers()

    def _compact_timers(self) -> None:
        """Drop the timers of leases no longer in flight (acked, nacked, renewed, their client expired)."""
        self.timers = [entry for entry in self.timers if self._timer_live(entry[2])]
        heapq.heapify(self.timers)
        self._stale_timers = 0

    def _timer_live(self, timer: Timer) -> bool:
        if timer.lease == 0:
            return True  # a FIFO suspension: a few, and cheap
        window = self.windows.get(timer.key)
        leased = window.in_flight.get(timer.offset) if window else None
        return leased is not None and leased.lease == timer.lease

    def expire_clients(self) -> list[str]:
        """Drop the broadcast clients not seen for their idle time: windows, leases, offsets."""
        gone = set(self.clients.gone(self.offsets.owners(), self.now_ms()))
        if not gone:
            return []
        for key in [k for k in self.windows if k.owner in gone]:
            del self.windows[key]
        for turn in [t for t in self._rotation if t[0] in gone]:
            del self._rotation[turn]
        for owner in gone:
            self.offsets.forget(owner)
        self._compact_timers()
        return sorted(gone)
