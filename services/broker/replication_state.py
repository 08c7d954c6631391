"""A broker's part in replication: a master's ReplicationSource streams its CommitLog to its slaves; a
slave's FollowerState is what services.broker.replica_follower knows of its master; a slave takes no
writes, nor does a master under a controller whose lease ran out (WriteFence). The routes are in
services.broker.replication.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, Gauge
from starlette.types import Scope

from libs.broker_api.replication import (
    HEARTBEAT_SECONDS,
    BrokerRole,
    ReplicationStatus,
    SlaveAck,
    SlaveAckAnswer,
    SlaveState,
    frame,
)
from libs.codec import record_size
from libs.errors import NotMaster, OffsetOutOfRange, PetrelError, ReplicaDiverged
from libs.http.guards import HTTP_ONLY, Refusal
from libs.store.epochs import EpochFile
from libs.store.message_store import MessageStore
from libs.store.replica import read_chunk
from services.broker.in_sync import InSyncReplicas

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class ReplicationSource:
    """A master's CommitLog, streamed to each slave that asks from where its own log ends."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.streaming = 0
        """Streams open to slaves now."""
        self._appended = asyncio.Event()
        self.closed = False
        """The server is stopping: every stream ends (the slaves ask again, of this master or its successor)."""

    def close(self) -> None:
        self.closed = True
        self._appended.set()

    def _on_dispatch(self, topic: str, queue_id: int, queue_offset: int, code: int) -> None:
        self._appended.set()

    def check_start(self, start: int) -> None:
        """Refuse, before the stream opens, a start this log cannot serve."""
        log = self.store.commitlog
        if start > log.write_offset:
            raise ReplicaDiverged(
                f"the slave's log ends at {start}, past this master's end {log.write_offset}: "
                "it holds what this master never wrote",
                master_end=log.write_offset,
            )
        if start < log.min_offset:
            raise OffsetOutOfRange(
                f"CommitLog offset {start} was deleted by retention here; this log begins at {log.min_offset}",
                min_offset=log.min_offset,
                max_offset=log.write_offset,
            )

    async def stream(self, start: int) -> AsyncIterator[bytes]:
        """Frames from `start` on, for as long as the slave listens; a heartbeat when there is nothing new."""
        offset = start
        if not self.streaming:  # listened to only while a slave streams: without one, a record costs nothing here
            self.store.listeners.append(self._on_dispatch)
        self.streaming += 1
        try:
            while not self.closed:
                chunk = read_chunk(self.store.commitlog, offset)
                if chunk:
                    yield frame(offset, chunk)
                    offset += len(chunk)
                    continue
                self._appended.clear()
                try:
                    async with asyncio.timeout(HEARTBEAT_SECONDS):
                        await self._appended.wait()
                except TimeoutError:
                    yield frame(self.store.commitlog.write_offset, b"")
        finally:
            self.streaming -= 1
            if not self.streaming:
                self.store.listeners.remove(self._on_dispatch)


class WriteFence:
    """A slave answers reads only: every other call to it is NotMaster (409), naming its master. So does a master
    under a controller whose etcd lease may have expired (it may have been replaced): it is fenced.

    Set up in the broker's lifespan, once its role for this run is known (a controller decides it at start)."""

    scopes = HTTP_ONLY

    def __init__(self, broker_name: str) -> None:
        self.broker_name = broker_name
        self.slave_of: str | None = None
        """Set: this broker is a slave, of this master."""
        self.is_slave = False
        self.lease_held: Callable[[], bool] | None = None

    def slave(self, master: str | None) -> None:
        self.is_slave, self.slave_of = True, master

    async def refusal(self, scope: Scope) -> Refusal | None:
        if not self.is_slave and self.lease_held is None:
            return None
        if scope["method"] in READ_METHODS or not scope["path"].startswith("/internal/"):
            return None
        if self.is_slave:
            return Refusal(
                NotMaster(
                    f"this broker is a slave of {self.broker_name}: writes go to its master ({self.slave_of})",
                    master=self.slave_of,
                )
            )
        if self.lease_held is not None and not self.lease_held():
            return Refusal(fenced_master(self.broker_name))
        return None


def fenced_master(broker_name: str) -> NotMaster:
    return NotMaster(
        f"this master of {broker_name} cannot be sure its etcd lease still lives: it may have been replaced, and "
        "takes no write"
    )


class Electable(Protocol):
    """A controlled master's in-sync set as etcd records it (services.broker.controller_link.ControllerLink)."""

    def electable(self) -> list[int]: ...

    async def recorded(self, slave_id: int, timeout: float) -> bool: ...


class Replication:
    """A broker's part in replication: a master's source and in-sync set, or a slave's follower."""

    def __init__(
        self,
        role: BrokerRole,
        broker_name: str,
        broker_id: int,
        store: MessageStore,
        in_sync: InSyncReplicas | None = None,
        topics_version: Callable[[], int] = lambda: 0,
        epochs: EpochFile | None = None,
    ) -> None:
        self.role = role
        self.epochs = epochs or EpochFile(store.config.root)
        self.lease_held: Callable[[], bool] | None = None
        """Under a controller, a master's: whether it may still acknowledge writes."""
        self.controller: Electable | None = None
        """Under a controller, a master's: the slaves etcd records as in sync (those that may be promoted)."""
        self.broker_name = broker_name
        self.broker_id = broker_id
        self.store = store
        self.source = ReplicationSource(store) if role is not BrokerRole.SLAVE else None
        self.in_sync = in_sync if role is not BrokerRole.SLAVE else None
        self.follower: FollowerState | None = None
        self.topics_version = topics_version
        if role is BrokerRole.SYNC_MASTER and in_sync is not None:
            store.replication_wait = in_sync.wait
            # What it stored before this run may have been answered: a slave joins once it has all of it.
            in_sync.answered = store.commitlog.write_offset

    @property
    def master(self) -> str | None:
        return None if self.follower is None else self.follower.master

    @property
    def fenced(self) -> bool:
        return self.lease_held is not None and not self.lease_held()

    def most_lag_bytes(self) -> int:
        """A master: what its slave furthest behind lacks; a slave: what it lacks of its master's log."""
        end = self.store.commitlog.write_offset
        if self.in_sync is not None:
            return max((max(0, end - s.acked) for s in self.in_sync.slaves.values()), default=0)
        master_end = None if self.follower is None else self.follower.master_end
        return 0 if master_end is None else max(0, master_end - end)

    async def joined(self, slave_id: int, timeout: float) -> None:
        """A master: until slave `slave_id` is in its in-sync set and, under a controller, recorded there too (then
        the controller may promote it), or `timeout` seconds pass."""
        if self.in_sync is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self.in_sync.joined(slave_id, timeout)
        if self.controller is not None:
            await self.controller.recorded(slave_id, max(0.0, deadline - loop.time()))

    def fence(self, lease_held: Callable[[], bool]) -> None:
        """Under a controller: no put is answered once the lease has run out, whatever it waited for."""
        self.lease_held = lease_held
        waits = self.store.replication_wait

        async def then_check_lease(offset: int) -> None:
            if waits is not None:
                await waits(offset)
            if not lease_held():
                raise fenced_master(self.broker_name)

        self.store.replication_wait = then_check_lease

    def acked(self, slave_id: int, ack: SlaveAck) -> SlaveAckAnswer:
        """A slave said how far it has written."""
        if self.in_sync is None:
            raise NotMaster(f"this broker is a slave of {self.broker_name}")
        end = self.store.commitlog.write_offset
        self.in_sync.acked(slave_id, ack.address, ack.offset, end)
        return SlaveAckAnswer(
            master_end=end, in_sync=self.in_sync.slaves[slave_id].in_sync, topics_version=self.topics_version()
        )

    def close(self) -> None:
        """The server is stopping: end the streams to the slaves."""
        if self.source is not None:
            self.source.close()

    def _lag_ms(self, acked: int, end: int) -> int | None:
        """Since when the first record a slave does not have (at `acked`) waits for it, in ms; None: unknown."""
        if acked >= end:
            return 0
        log = self.store.commitlog
        try:
            segment = log.segment_at(acked)
            if record_size(segment.map, acked - segment.start_offset)[1]:  # a blank filler: the next segment's first
                acked = segment.end_offset
            stored = log.stored_at(acked) if acked < end else None
        except PetrelError:
            return None
        return None if stored is None else max(0, int(self.store.clock() * 1000) - stored)

    def status(self) -> ReplicationStatus:
        end = self.store.commitlog.write_offset
        status = ReplicationStatus(
            role=self.role,
            broker_name=self.broker_name,
            broker_id=self.broker_id,
            commitlog_end=end,
            epoch=self.epochs.last_epoch,
            fenced=self.fenced,
        )
        if self.source is not None:
            status.slaves_streaming = self.source.streaming
        if self.in_sync is not None:
            now = self.in_sync.clock()
            status.in_sync = self.in_sync.in_sync()
            status.electable = None if self.controller is None else self.controller.electable()
            status.slaves = [
                SlaveState(
                    slave_id=s.slave_id,
                    address=s.address,
                    acked_offset=s.acked,
                    lag_bytes=max(0, end - s.acked),
                    lag_ms=self._lag_ms(s.acked, end),
                    in_sync=s.in_sync,
                    heard_seconds_ago=round(now - s.heard_at, 3),
                )
                for s in sorted(self.in_sync.slaves.values(), key=lambda s: s.slave_id)
            ]
        if self.follower is not None:
            follower = self.follower
            status.master, status.connected, status.master_end = (
                follower.master,
                follower.connected,
                follower.master_end,
            )
            status.lag_bytes = None if follower.master_end is None else max(0, follower.master_end - end)
        return status


class FollowerState:
    """What a slave's follower knows of its master (services.broker.replica_follower keeps it)."""

    def __init__(self, master: str) -> None:
        self.master = master
        self.connected = False
        self.master_end: int | None = None


def watch_replication(registry: CollectorRegistry, replication: Replication) -> None:
    """Gauges of a broker's replication, each read at a scrape from what it measures."""

    def gauge(name: str, description: str, value: Callable[[], float]) -> None:
        Gauge(name, description, registry=registry).set_function(value)

    gauge(
        "petrel_replication_epoch",
        "Under a controller: the last epoch this broker holds data of",
        lambda: replication.epochs.last_epoch,
    )
    gauge(
        "petrel_replication_in_sync_slaves",
        "A master: slaves in its in-sync set (a SYNC_MASTER's writes wait for each)",
        lambda: 0 if replication.in_sync is None else len(replication.in_sync.in_sync()),
    )
    gauge(
        "petrel_replication_lag_bytes",
        "A master: the most any of its slaves lacks; a slave: what it lacks of its master's log",
        replication.most_lag_bytes,
    )
    gauge(
        "petrel_replication_fenced",
        "1: a master under a controller whose lease ran out (it takes no writes)",
        lambda: float(replication.fenced),
    )
