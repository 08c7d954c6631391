"""ControllerLink: a controlled broker's link to etcd: its report, its role, a master's lease and in-sync set.

At each start of the broker's app (a run, with a random id) the broker is granted an etcd
lease of `master_lease_seconds`, kept alive by a LeaseKeeper, and puts its report (address,
log end, last epoch, run) on it under `brokers/{name}/replicas/{id}` (libs.controller_api):
present while this run lives. It reads (and watches) `brokers/{name}/state` until the state
names a master. It is master only if the state names its id and this run; its id with another
run (its previous run) means the controller has yet to grant again, and it waits. A state
whose epoch is below the last epoch this broker holds data of is refused (the controller
replaces a stale state). A master then takes the role by creating `brokers/{name}/master` on
its own lease, in a transaction that holds only if the state is still the one it read and the
key is absent. From then on its right to write is that lease: `holds_lease` is true while
etcd cannot have expired it (the TTL less `margin`, from each keep-alive's send), whichever
controller leads meanwhile.

While it runs it watches the state: a new epoch or master, a lost lease: the app restarts
(`restart`) to take its new role. A slave restarting for a new role hands its run and lease
over to the next app of the same process (`hand_over`, `RunHandover`): the grant that promoted
it names that run, and a new run would need a second election (a second epoch) first. A
master, or a run whose lease is lost, starts the next app with a new run on a new lease. It
puts its report again when it changed (its log end alone: every LOG_END_REPORT_SECONDS). A
master records its in-sync changes in the state itself (`change_in_sync`), conditioned on
the state's mod_revision, so a grant made in between makes the change fail, and a shrink is
in etcd before any write stops waiting for the slave that left.

A master whose store turned read-only (a sync failed: libs.store.flush) hands over when a
slave is in sync (`_resign`): it records the in-sync set without itself, then revokes its
lease, so the controller promotes that slave at once and cannot elect this broker again
until it has caught up as a slave; its app restarts (re-opening the store, validated from the
last checkpoint) as a new run. With no slave in sync it stays master for reads and refuses
writes (503 `store-read-only`): handing over then would leave the broker name without a master
that has every answered write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ValidationError

from libs.controller_api import MasterClaim, ReplicaReport, ReplicationState, master_key, replica_key, state_key
from libs.etcd import Compare, EtcdClient, EtcdError, Get, Lease, LeaseKeeper, Put, RangeResult
from libs.store.epochs import EpochFile
from libs.store.message_store import MessageStore
from libs.tasks import cancelled
from services.broker.in_sync import InSyncReplicas

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
LOG_END_REPORT_SECONDS = 5.0
"""How often a report is put again when only its log end moved. The log end only ranks the live members of the
in-sync set at an election (each has every acknowledged write, whichever is chosen), and a put on every heartbeat
of a busy broker (a raft round and an fsync on each etcd member, and a rescan by the controller watching) cost
SYNC_MASTER sends about a fifth of their rate on 2 cores."""


@dataclass(frozen=True, slots=True)
class RunHandover:
    """A run's identity and lease, passed from one app of the broker's process to the next."""

    run_id: str
    lease: Lease
    valid_until: float
    """the old keeper's: on the process's monotonic clock, until when etcd cannot have expired the lease"""


class ControllerLink:
    def __init__(
        self,
        client: EtcdClient,
        broker_name: str,
        broker_id: int,
        address: str,
        store: MessageStore,
        epochs: EpochFile,
        *,
        heartbeat: float,
        lease_ttl: int,
        margin: float,
        clock: Callable[[], float] = time.monotonic,
        handover: RunHandover | None = None,
    ) -> None:
        self.client = client
        self.broker_name = broker_name
        self.broker_id = broker_id
        self.address = address
        self.store = store
        self.epochs = epochs
        self.heartbeat = heartbeat
        self.lease_ttl = lease_ttl
        self.margin = margin
        self.clock = clock
        self.handover = handover
        self.run_id = handover.run_id if handover else secrets.token_hex(8)
        """This run of the broker: a grant names it, and a later run is not granted by it."""
        self._handed_over = False
        self.keeper: LeaseKeeper | None = None
        self._keeping: asyncio.Task[None] | None = None
        self.run_as: ReplicationState | None = None
        """The state this run took its role from."""
        self.last: ReplicationState | None = None
        """The state as last read or written; its mod_revision is `_revision`."""
        self._revision = 0
        self._reported: ReplicaReport | None = None
        self._reported_at = 0.0
        self._master_taken = False
        self._changing = asyncio.Lock()
        self._recorded = asyncio.Event()
        """Set (and replaced) each time `last` changes: what waits for a slave to be recorded wakes."""
        self._read_only_logged = False
        self._resigned = False

    @property
    def is_master(self) -> bool:
        run_as = self.run_as
        return run_as is not None and run_as.master_id == self.broker_id and run_as.master_run == self.run_id

    def holds_lease(self) -> bool:
        """A master's right to write: its master key taken, and its lease surely alive."""
        return self._master_taken and self.keeper is not None and self.keeper.holds()

    @property
    def lease_lost(self) -> bool:
        return self.keeper is not None and self.keeper.lost.is_set()

    # -- start

    async def start(self) -> None:
        """This run's lease, kept alive from now on, and its first report on it."""
        if self.handover is not None and await self._adopt(self.handover):
            return
        while True:
            try:
                self.keeper = await LeaseKeeper.grant(self.client, self.lease_ttl, margin=self.margin, clock=self.clock)
                self._keeping = asyncio.create_task(self.keeper.run(), name="broker-etcd-lease")
                await self.report()
                return
            except EtcdError as exc:
                log.warning("etcd: no lease for %s/%d yet (%s); trying again", self.broker_name, self.broker_id, exc)
                await self._stop_keeping()
                await asyncio.sleep(RETRY_SECONDS)

    async def _adopt(self, handover: RunHandover) -> bool:
        """Keep the previous app's lease as this app's; False (and a new run) when etcd has ended it."""
        lease = handover.lease
        granted_at = handover.valid_until - lease.ttl + self.margin
        self.keeper = LeaseKeeper(self.client, lease, granted_at=granted_at, margin=self.margin, clock=self.clock)
        try:
            await self.keeper.renew()
            self._keeping = asyncio.create_task(self.keeper.run(), name="broker-etcd-lease")
            await self.report()
            return True
        except EtcdError as exc:
            log.warning("etcd: the previous run's lease is not kept (%s): a new run", exc)
            await self._stop_keeping()
            self.keeper, self.run_id, self._reported = None, secrets.token_hex(8), None
            return False

    def hand_over(self) -> RunHandover | None:
        """This run and its lease for the next app of the process, when it is a slave whose lease lives (close then
        leaves the lease alone); None otherwise."""
        keeper = self.keeper
        if keeper is None or self._master_taken or not keeper.holds():
            return None
        self._handed_over = True
        return RunHandover(self.run_id, keeper.lease, keeper.valid_until)

    def report_now(self) -> ReplicaReport:
        return ReplicaReport(
            address=self.address,
            log_end=self.store.commitlog.write_offset,
            epoch=self.epochs.last_epoch,
            run=self.run_id,
        )

    async def report(self) -> None:
        """Put this broker's report on its lease when it changed since the last one: at once when its address,
        epoch or run did, every LOG_END_REPORT_SECONDS when only its log end moved."""
        now, last = self.report_now(), self._reported
        if now == last or self.keeper is None:
            return
        if (
            last is not None
            and now.model_copy(update={"log_end": last.log_end}) == last
            and self.clock() - self._reported_at < LOG_END_REPORT_SECONDS
        ):
            return
        await self.client.put(
            replica_key(self.broker_name, self.broker_id), now.model_dump_json(), lease=self.keeper.lease.id
        )
        self._reported, self._reported_at = now, self.clock()

    async def state_at_start(self) -> tuple[ReplicationState, int]:
        """The state naming a master this run may act on (itself at this run, or another broker), and its
        mod_revision; waits on a watch of the state until there is one."""
        key = state_key(self.broker_name)
        while True:
            if self.lease_lost:  # expired while it waited (etcd unreachable): a new lease, a new report
                await self._stop_keeping()
                await self.start()
            try:
                read = await self.client.range(key)
                usable = self._usable(read)
                if usable is not None:
                    return usable
                await self.client.watch_once(key, start_revision=read.revision + 1, timeout=RETRY_SECONDS)
            except EtcdError as exc:
                log.warning("etcd: %s's state not read (%s); trying again", self.broker_name, exc)
                await asyncio.sleep(RETRY_SECONDS)

    def _usable(self, read: RangeResult) -> tuple[ReplicationState, int] | None:
        if not read.kvs:
            log.info("controller: %s has no master yet; waiting", self.broker_name)
            return None
        state = _state(read.kvs[0].value)
        if state is None:
            return None
        if state.epoch < self.epochs.last_epoch:
            log.warning(
                "controller: %s's state says epoch %d, below epoch %d this broker holds data of: refused, waiting for "
                "the controller to replace it",
                self.broker_name,
                state.epoch,
                self.epochs.last_epoch,
            )
            return None
        if state.master_id == self.broker_id and state.master_run != self.run_id:
            log.info("controller: %s's grant to broker %d was for its previous run; waiting for a new one",
                     self.broker_name, self.broker_id)  # fmt: skip
            return None
        return state, read.kvs[0].mod_revision

    async def take_master(self, state: ReplicationState, revision: int) -> bool:
        """Create the master key on this run's lease, if the state is still `revision` and no key exists; whether
        this run holds it."""
        assert self.keeper is not None
        claim = MasterClaim(broker_id=self.broker_id, run=self.run_id, epoch=state.epoch).model_dump_json()
        key = master_key(self.broker_name)
        result = await (
            self.client.txn()
            .when(
                Compare.mod_revision(state_key(self.broker_name), "==", revision), Compare.create_revision(key, "==", 0)
            )
            .then(Put(key, claim, lease=self.keeper.lease.id))
            .otherwise(Get(key))
            .commit()
        )
        held = result.responses[0] if not result.succeeded and result.responses else None
        # a retried call whose first answer was lost: the key is there on this run's lease
        self._master_taken = result.succeeded or (
            isinstance(held, RangeResult) and bool(held.kvs) and held.kvs[0].lease == self.keeper.lease.id
        )
        return self._master_taken

    def take(self, state: ReplicationState, revision: int) -> None:
        """This run's role is the one `state` gives."""
        self.run_as = state
        self._seen(state, revision)

    def _seen(self, state: ReplicationState, revision: int) -> None:
        """The state as etcd now has it (read, watched or written)."""
        self.last, self._revision = state, revision
        self._recorded.set()
        self._recorded = asyncio.Event()

    def electable(self) -> list[int]:
        """A master's slaves that the state in etcd records as in sync: those the controller may promote."""
        last = self.last
        return [] if last is None else [i for i in last.in_sync if i != self.broker_id]

    async def recorded(self, slave_id: int, timeout: float) -> bool:
        """Until the state in etcd records slave `slave_id` as in sync, or `timeout` seconds pass; whether it does."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while slave_id not in self.electable():
                    await self._recorded.wait()
        return slave_id in self.electable()

    def role_changed(self, state: ReplicationState | None) -> str | None:
        """Why this run's role no longer holds under `state` (None: it holds)."""
        run_as = self.run_as
        if run_as is None:
            return None
        if state is None:
            return f"{self.broker_name}'s state is gone from etcd"
        if (state.epoch, state.master_id, state.master_run) != (run_as.epoch, run_as.master_id, run_as.master_run):
            return (
                f"{self.broker_name}'s master is now broker {state.master_id} ({state.master_address}) at epoch "
                f"{state.epoch}; this run was at epoch {run_as.epoch} with master {run_as.master_id}"
            )
        return None

    # -- running

    async def change_in_sync(self, kept: list[int]) -> bool:
        """A master's in-sync set, now this master and the slaves `kept`, recorded in etcd; False: it was not (etcd
        unreachable, or this master's epoch is over)."""
        return await self._write_in_sync(lambda: sorted({self.broker_id, *kept}))

    async def _write_in_sync(self, wanted: Callable[[], list[int]], *, resigning: bool = False) -> bool:
        """`resigning`: the master leaves the set (`_resign`); once that is written, no change puts it back (a slave's
        join recorded just after would otherwise make this read-only master electable again)."""
        key = state_key(self.broker_name)
        async with self._changing:  # one change at a time, each computed from the set as it is when it is written
            if not self.is_master or self._resigned:
                return False
            try:
                for _ in range(3):
                    last = self.last
                    assert last is not None
                    if wanted() == last.in_sync:
                        return True  # (resigning: a master is always in its set, so never here)
                    new = last.model_copy(update={"in_sync": wanted(), "version": last.version + 1})
                    result = await (
                        self.client.txn()
                        .when(Compare.mod_revision(key, "==", self._revision))
                        .then(Put(key, new.model_dump_json()))
                        .otherwise(Get(key))
                        .commit()
                    )
                    if result.succeeded:
                        self._seen(new, result.revision)
                        self._resigned = resigning
                        log.info("controller: %s in-sync set %s -> %s", self.broker_name, last.in_sync, new.in_sync)
                        return True
                    held = result.responses[0] if result.responses else None
                    if not isinstance(held, RangeResult) or not held.kvs:
                        return False
                    current = _state(held.kvs[0].value)
                    if current is None or self.role_changed(current) is not None:
                        return False  # a grant came in between: this master's epoch is over
                    self._seen(current, held.kvs[0].mod_revision)
            except EtcdError as exc:
                log.warning("etcd: %s's in-sync set not recorded (%s)", self.broker_name, exc)
        return False

    async def run(self, in_sync: InSyncReplicas | None, restart: Callable[[str], None]) -> None:
        """Until cancelled: watch the state (a new role restarts the app), report every `heartbeat` when something
        changed; a master also records slaves that joined, and drops (recorded first) those gone silent or behind
        for longer than the lag bound (services.broker.in_sync_rules). A slave that joined is recorded at once
        (`_record_joins`)."""
        recording = asyncio.create_task(self._record_joins(in_sync), name="broker-in-sync-joins") if in_sync else None
        try:
            await self._follow(in_sync, restart)
        finally:
            if recording is not None:
                await cancelled(recording)

    async def _follow(self, in_sync: InSyncReplicas | None, restart: Callable[[str], None]) -> None:
        while True:
            why = "this broker's etcd lease is gone" if self.lease_lost else await self._watch_state()
            if why is None and in_sync is not None and self.is_master and self.store.read_only:
                why = await self._resign(in_sync)
            if why is not None:
                log.warning("controller: %s: restarting as the new role", why)
                restart(why)
                self._master_taken = False  # no write is acknowledged while the app stops
                return
            try:
                await self.report()
            except EtcdError as exc:
                log.warning("etcd: report of %s/%d not written (%s)", self.broker_name, self.broker_id, exc)
            if in_sync is not None and self.is_master:
                await in_sync.drop_lagging(self.store.commitlog.write_offset)
                await self._write_in_sync(lambda: sorted({self.broker_id, *in_sync.in_sync()}))

    async def _resign(self, in_sync: InSyncReplicas) -> str | None:
        """This master's store is read-only: leave the in-sync set (recorded in etcd first), then give up the lease;
        why its run is over, or None while no slave is in sync to take over (or etcd did not take the change)."""
        others = [slave for slave in in_sync.in_sync() if slave != self.broker_id]
        if not others:
            if not self._read_only_logged:
                self._read_only_logged = True
                log.error(
                    "controller: %s's store is read-only and no slave is in sync: this broker stays master for reads "
                    "and refuses writes until it is restarted (or a slave catches up and takes over)",
                    self.broker_name,
                )
            return None
        if not await self._write_in_sync(lambda: others, resigning=True):
            return None
        self._master_taken = False  # nothing more is acknowledged on this run's lease
        await self._stop_keeping()
        keeper, self.keeper = self.keeper, None
        if keeper is not None:
            with contextlib.suppress(EtcdError, TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.client.revoke(keeper.lease.id)  # at its expiry otherwise: the failover waits a TTL
        return (
            f"this master's store is read-only (a sync failed): it left {self.broker_name}'s in-sync set to slaves "
            f"{others} and gave up its lease, so the controller promotes one of them"
        )

    async def _record_joins(self, in_sync: InSyncReplicas) -> None:
        """Each slave that joins, in etcd's in-sync set as soon as it joins, not at the next heartbeat: until it is
        there, the controller may not promote it, and a crash of this master leaves nobody to promote."""
        while True:
            await in_sync.grew.wait()
            in_sync.grew.clear()
            if self.is_master:
                await self._write_in_sync(lambda: sorted({self.broker_id, *in_sync.in_sync()}))

    async def _watch_state(self) -> str | None:
        """The state's changes for up to a heartbeat; why this run's role is over (None: it is not)."""
        key = state_key(self.broker_name)
        try:
            events = await self.client.watch_once(key, start_revision=self._revision + 1, timeout=self.heartbeat)
        except EtcdError as exc:  # a broken stream, a compacted revision: read it instead
            log.warning("etcd: watch of %s's state failed (%s); reading it", self.broker_name, exc)
            try:
                read = await self.client.range(key)
            except EtcdError:
                await asyncio.sleep(self.heartbeat)
                return None
            current = _state(read.kvs[0].value) if read.kvs else None
            why = self.role_changed(current)
            if why is None and current is not None:
                self._seen(current, read.kvs[0].mod_revision)
            return why
        for event in events:
            current = None if event.kind == "DELETE" else _state(event.kv.value)
            why = self.role_changed(current)
            if why is not None:
                return why
            if current is not None and event.kv.mod_revision > self._revision:
                self._seen(current, event.kv.mod_revision)
        return None

    async def _stop_keeping(self) -> None:
        if self._keeping is not None:
            await cancelled(self._keeping)
            self._keeping = None

    async def close(self) -> None:
        """This run ends: its lease is revoked, so its report and master key go now rather than at its expiry."""
        self._master_taken = False
        await self._stop_keeping()
        if self.keeper is not None and not self._handed_over:
            with contextlib.suppress(EtcdError, TimeoutError):
                async with asyncio.timeout(1.0):
                    await self.client.revoke(self.keeper.lease.id)
        await self.client.close()


def _state(value: bytes) -> ReplicationState | None:
    try:
        return ReplicationState.model_validate_json(value)
    except ValidationError as exc:
        log.warning("etcd: a broker name's state is not a ReplicationState (%s): ignored", exc)
        return None
