"""Controller: one nameserver's candidacy for the controller's lead, and, while it leads, each broker name's master.

Every nameserver with `PETREL_NAMESERVER_CONTROLLER=true` campaigns for `controller/leader`
(libs.etcd Election) on a lease of its own (LEADER_TTL, kept by a LeaseKeeper); one leads, the
others wait on a watch of the key and campaign again when it goes. A candidate whose lease is
lost campaigns again with a new one. Only the leader acts: it reads every key under
`brokers/`, decides per broker name (services.nameserver.controller_rules) and commits each
grant in a transaction that also holds only while it leads (`leads_compare`) and while the keys
it read are unchanged, so a leader paused past its lease and resumed cannot write. It reads
again at each change (a watch from the read's revision) and every `scan_interval`.

State lives in etcd only. An old `<data_dir>/nameserver/controller.json` is imported once, by a
leader, for the broker names etcd has no state of, then renamed `controller.json.imported`.
Time is this process's monotonic clock (how long a name waited for its first master); whether
a broker lives is etcd's lease expiry, never a clock here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from libs.controller_api import BROKERS_PREFIX, LEADER_KEY, ReplicationState, master_key, replica_key, state_key
from libs.etcd import Compare, Election, EtcdClient, EtcdError, LeaseKeeper, Put
from libs.events.writer import EventWriter
from libs.tasks import cancelled
from services.nameserver.controller_rules import BrokerNameSeen, Grant, Waiting, decide
from services.nameserver.controller_view import read_broker_names

log = logging.getLogger(__name__)

LEADER_TTL = 2
"""Seconds: etcd's shortest lease (1.5 election timeouts at its defaults); a dead leader is replaced that fast."""
LEADER_MARGIN = 0.5
STATE_FILE = "controller.json"
IMPORTED_SUFFIX = ".imported"
PAUSE_AFTER_ERROR = 0.5


class Controller:
    def __init__(
        self,
        client: EtcdClient,
        address: str,
        *,
        master_timeout: float,
        scan_interval: float,
        state_dir: Path,
        events: EventWriter,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.address = address
        self.master_timeout = master_timeout
        self.scan_interval = scan_interval
        self.old_file = state_dir / STATE_FILE
        self.events = events
        self.clock = clock
        self.leading = asyncio.Event()
        """Set while this nameserver's controller leads."""
        self.current_election: Election | None = None
        """This controller's candidacy now (its lease's)."""
        self.elections = 0
        """Grants this controller committed."""
        self.scans = 0
        """Times it read etcd and decided, while leading."""
        self._first_seen: dict[str, float] = {}
        self._waiting: dict[str, str] = {}

    async def run(self) -> None:
        """Campaign, lead while it may, and campaign again, until cancelled."""
        while True:
            try:
                keeper = await LeaseKeeper.grant(self.client, LEADER_TTL, margin=LEADER_MARGIN)
            except EtcdError as exc:
                log.warning("controller: no lease from etcd (%s); trying again", exc)
                await asyncio.sleep(PAUSE_AFTER_ERROR)
                continue
            keeping = asyncio.create_task(keeper.run(), name="controller-lease")
            election = self.current_election = Election(
                self.client, LEADER_KEY, lease=keeper.lease.id, value=self.address
            )
            try:
                await self._campaign(election, keeper)
                if not keeper.lost.is_set():
                    await self._lead(election, keeper)
            except EtcdError as exc:
                log.warning("controller: etcd failed (%s); campaigning again", exc)
                await asyncio.sleep(PAUSE_AFTER_ERROR)
            finally:
                if self.leading.is_set():
                    log.warning("controller: %s no longer leads", self.address)
                self.leading.clear()
                await cancelled(keeping)
                with contextlib.suppress(EtcdError, TimeoutError):  # the next leader need not wait for its expiry
                    async with asyncio.timeout(1.0):
                        await self.client.revoke(keeper.lease.id)

    async def _campaign(self, election: Election, keeper: LeaseKeeper) -> None:
        while not keeper.lost.is_set():
            if await election.try_campaign():
                return
            held = await self.client.range(LEADER_KEY)
            if held.kvs:  # until it goes; from the read's revision, so a deletion is not missed
                await self.client.watch_once(LEADER_KEY, start_revision=held.revision + 1, timeout=LEADER_TTL / 2)

    async def _lead(self, election: Election, keeper: LeaseKeeper) -> None:
        log.warning("controller: %s leads", self.address)
        self.leading.set()
        self._first_seen.clear()
        await self._import_old_file(election)
        while not keeper.lost.is_set():
            revision = await self.scan(election)
            if revision is None:
                return
            try:
                await self.client.watch_once(
                    BROKERS_PREFIX, prefix=True, start_revision=revision + 1, timeout=self.scan_interval
                )
            except EtcdError as exc:  # a broken stream, a compacted revision: the next scan reads afresh
                log.info("controller: watch of %s ended (%s); reading again", BROKERS_PREFIX, exc)

    async def scan(self, election: Election) -> int | None:
        """Decide for every broker name once; the revision read (None: this controller no longer leads)."""
        names, revision = await read_broker_names(self.client)
        self.scans += 1
        now = self.clock()
        for name, seen in names.items():
            decision = decide(
                seen, waited=now - self._first_seen.setdefault(name, now), master_timeout=self.master_timeout
            )
            if isinstance(decision, Waiting):
                if self._waiting.get(name) != decision.why:
                    log.warning("controller: %s: %s", name, decision.why)
                self._waiting[name] = decision.why
                continue
            self._waiting.pop(name, None)
            committed = isinstance(decision, Grant) and await self.commit(election, seen, decision)
            if isinstance(decision, Grant) and not committed and not await election.is_leader():
                return None
        return revision

    async def commit(self, election: Election, seen: BrokerNameSeen, grant: Grant) -> bool:
        """The grant, if this controller still leads and nothing it decided on changed since it read."""
        name, state = seen.name, grant.state
        compares = [
            election.leads_compare(),
            Compare.mod_revision(state_key(name), "==", seen.state_revision),
            Compare.create_revision(master_key(name), "==", 0),
            Compare.mod_revision(replica_key(name, state.master_id), "==", seen.replica_revisions[state.master_id]),
        ]
        result = await self.client.txn().when(*compares).then(Put(state_key(name), state.model_dump_json())).commit()
        if not result.succeeded:
            log.info("controller: %s changed while deciding (or this controller lost the lead); reading again", name)
            return False
        self.elections += 1
        log.warning(
            "controller: %s master is now broker %d (%s) at epoch %d, in-sync %s: %s",
            name,
            state.master_id,
            state.master_address,
            state.epoch,
            state.in_sync,
            grant.why,
        )
        self.events.emit(
            "master_elected",
            broker=name,
            broker_id=state.master_id,
            address=state.master_address,
            epoch=state.epoch,
            previous_master_id=grant.previous_master_id,
            log_end=grant.log_end,
        )
        return True

    async def _import_old_file(self, election: Election) -> None:
        """controller.json of the controller before etcd: its broker names that etcd has no state of, once."""
        if not self.old_file.exists():
            return
        try:
            saved = json.loads(self.old_file.read_text())
            states = {
                name: ReplicationState(
                    epoch=group["epoch"],
                    master_id=group["master_id"],
                    master_address=group["master_address"],
                    master_run="imported",  # no run of a broker: its master is gone, a new epoch is granted
                    in_sync=sorted(group["in_sync"]),
                    version=1,
                )
                for name, group in saved.items()
                if group.get("master_id") is not None
            }
        except (OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
            log.error("controller: %s cannot be read (%s): not imported", self.old_file, exc)
            return
        for name, state in states.items():
            result = await (
                self.client.txn()
                .when(election.leads_compare(), Compare.create_revision(state_key(name), "==", 0))
                .then(Put(state_key(name), state.model_dump_json()))
                .commit()
            )
            imported = "imported" if result.succeeded else "already in etcd, not imported"
            log.warning("controller: %s from %s (epoch %d): %s", name, self.old_file, state.epoch, imported)
        if await election.is_leader():
            self.old_file.rename(self.old_file.with_name(STATE_FILE + IMPORTED_SUFFIX))
