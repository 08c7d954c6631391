"""Controller: each broker name's master, epoch and in-sync set; promotes a slave when the master goes silent.

The contract and its rules are in libs.controller_api. What must survive a restart of the
nameserver (each broker name's epoch, master and in-sync set) is written to
`<data_dir>/controller.json` (written whole, synced, renamed) before any answer that
depends on it: an epoch never goes back, so a master fenced once stays fenced.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from libs.controller_api import Assignment, BrokerNameState, BrokerReport, ControllerView, InSyncChange, ReportedBroker
from libs.errors import StaleEpoch
from libs.events.writer import EventWriter
from libs.private_files import write_private

log = logging.getLogger(__name__)

STATE_FILE = "controller.json"


@dataclass(slots=True)
class Reported:
    address: str
    log_end: int
    epoch: int
    heard_at: float


@dataclass(slots=True)
class ReplicaGroup:
    """One broker name: the decided part (persisted) and what its brokers last said (not)."""

    epoch: int = 0
    master_id: int | None = None
    master_address: str | None = None
    in_sync: set[int] = field(default_factory=set)
    brokers: dict[int, Reported] = field(default_factory=dict)
    first_seen: float = 0.0

    def assignment(self, name: str) -> Assignment:
        return Assignment(
            broker_name=name,
            epoch=self.epoch,
            master_id=self.master_id,
            master_address=self.master_address,
            in_sync=sorted(self.in_sync),
        )


class Controller:
    def __init__(self, state_dir: Path, master_timeout: float, events: EventWriter, clock: Callable[[], float]) -> None:
        self.path = state_dir / STATE_FILE
        self.master_timeout = master_timeout
        self.events = events
        self.clock = clock
        self.groups: dict[str, ReplicaGroup] = {}

    def load(self) -> None:
        if not self.path.exists():
            return
        saved = json.loads(self.path.read_text())
        for name, group in saved.items():
            self.groups[name] = ReplicaGroup(
                epoch=group["epoch"],
                master_id=group["master_id"],
                master_address=group["master_address"],
                in_sync=set(group["in_sync"]),
                first_seen=self.clock(),
            )
        log.info("controller: %d broker name(s) read from %s", len(self.groups), self.path)

    def _save(self) -> None:
        state = {
            name: {
                "epoch": g.epoch,
                "master_id": g.master_id,
                "master_address": g.master_address,
                "in_sync": sorted(g.in_sync),
            }
            for name, g in self.groups.items()
        }
        write_private(self.path, json.dumps(state, indent=1).encode())

    def report(self, name: str, broker_id: int, report: BrokerReport) -> Assignment:
        """A broker said where it is; the broker name's assignment, a first master elected if there is none."""
        now = self.clock()
        group = self.groups.get(name)
        if group is None:
            group = self.groups[name] = ReplicaGroup(first_seen=now)
        group.brokers[broker_id] = Reported(report.address, report.log_end, report.epoch, now)
        if group.master_id == broker_id and group.master_address != report.address:
            group.master_address = report.address
            self._save()
        if group.master_id is None and self._may_begin(group, broker_id, now):
            self._elect(name, group, broker_id, "first master")
        return group.assignment(name)

    def _may_begin(self, group: ReplicaGroup, broker_id: int, now: float) -> bool:
        """A broker name without a master: broker id 0 begins it, or any broker once id 0 has not come in time."""
        if group.in_sync:  # it had masters: only a member of the set that has every acknowledged write
            return False
        return broker_id == 0 or now - group.first_seen >= self.master_timeout

    def change_in_sync(self, name: str, change: InSyncChange) -> Assignment:
        group = self.groups.get(name)
        if group is None or group.epoch != change.epoch or group.master_id != change.master_id:
            held = "nothing" if group is None else f"epoch {group.epoch}, master {group.master_id}"
            raise StaleEpoch(
                f"{name}: broker {change.master_id} spoke for epoch {change.epoch}; the controller holds {held}",
                epoch=None if group is None else group.epoch,
            )
        wanted = set(change.in_sync) | {change.master_id}
        if wanted != group.in_sync:
            log.info("controller: %s in-sync set %s -> %s (epoch %d)", name, group.in_sync, wanted, group.epoch)
            was, group.in_sync = group.in_sync, wanted
            try:
                self._save()
            except OSError:
                group.in_sync = was
                raise
        return group.assignment(name)

    def scan(self) -> None:
        """Promote a slave for each broker name whose master has not reported for `master_timeout`."""
        now = self.clock()
        for name, group in self.groups.items():
            if group.master_id is None:
                continue
            master = group.brokers.get(group.master_id)
            heard = master.heard_at if master is not None else group.first_seen
            if now - heard < self.master_timeout:
                continue
            alive = {
                i: b
                for i, b in group.brokers.items()
                if i != group.master_id and i in group.in_sync and now - b.heard_at < self.master_timeout
            }
            if not alive:
                continue
            chosen = max(alive, key=lambda i: (alive[i].log_end, -i))
            self._elect(name, group, chosen, f"master {group.master_id} silent for {now - heard:.1f} s")

    def _elect(self, name: str, group: ReplicaGroup, broker_id: int, why: str) -> None:
        old = (group.epoch, group.master_id, group.master_address, group.in_sync)
        # Past any epoch a broker holds data of: an epoch is never given twice, even if controller.json was lost.
        group.epoch = max([group.epoch, *(b.epoch for b in group.brokers.values())]) + 1
        group.master_id = broker_id
        group.master_address = group.brokers[broker_id].address
        group.in_sync = {broker_id}
        try:
            self._save()
        except OSError:
            group.epoch, group.master_id, group.master_address, group.in_sync = old
            raise
        log.warning(
            "controller: %s master is now broker %d (%s) at epoch %d: %s",
            name,
            broker_id,
            group.master_address,
            group.epoch,
            why,
        )
        self.events.emit(
            "master_elected",
            broker=name,
            broker_id=broker_id,
            address=group.master_address,
            epoch=group.epoch,
            previous_master_id=old[1],
            log_end=group.brokers[broker_id].log_end,
        )

    def view(self) -> ControllerView:
        now = self.clock()
        return ControllerView(
            broker_names=[
                BrokerNameState(
                    assignment=g.assignment(name),
                    brokers=[
                        ReportedBroker(
                            broker_id=i,
                            address=b.address,
                            log_end=b.log_end,
                            epoch=b.epoch,
                            heard_seconds_ago=round(now - b.heard_at, 3),
                        )
                        for i, b in sorted(g.brokers.items())
                    ],
                )
                for name, g in sorted(self.groups.items())
            ]
        )
