"""Applying a round's nemeses to a running cluster, and healing them; each one's span kept as a `Fault`.

The processes are tests.support.cluster.LocalCluster's (`Processes` says what is used of it): a
killed process is started again on its data after the step's hold; a killed master only once the
controller has promoted its slave (it returns as a slave); a stopped master is continued.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bench.nemesis import clock, disk, partitions
from bench.nemesis.plan import Nemesis, Step

BROKERS = ("broker-a", "broker-a@1")

EXPLAINS_DUPLICATES = frozenset(
    {
        Nemesis.KILL_MASTER,
        Nemesis.KILL_GATEWAY,
        Nemesis.STOP_MASTER,
        Nemesis.CUT_MASTER_FROM_CONTROLLER,
        Nemesis.CUT_MASTER_FROM_ALL,
    }
)
"""A crash on the write path (the gateway, the master) or an expired lease (a master stopped or cut off past its
TTL): a send under way may be stored and not answered, and its repeat stored again. The others touch no process a
send passes, or leave the master its lease."""


CLOCK_STEPS = {Nemesis.CLOCK_FORWARD: clock.STEP_SECONDS, Nemesis.CLOCK_BACK: -clock.STEP_SECONDS}
CLOCK_TARGETS = (Nemesis.KILL_MASTER, Nemesis.KILL_SLAVE, Nemesis.KILL_CONTROLLER_LEADER)
"""Whose clock a step moves: the master's, the slave's or the controller leader's (the process those nemeses hit)."""


class EtcdMember(Protocol):
    name: str

    def kill(self) -> None: ...

    def start(self) -> None: ...


class Etcd(Protocol):
    @property
    def members(self) -> Sequence[EtcdMember]: ...

    def wait_healthy(self, members: Any = None, timeout: float = 30.0) -> None:
        """Until the members given (a list of `members`' items) say they are healthy."""

    def leader(self) -> Any:
        """The member raft has made leader now (one of `members`)."""


class Processes(Protocol):
    """What a nemesis needs of a cluster (tests.support.cluster.LocalCluster, replicated, is one)."""

    nameserver_names: list[str]
    data_dir: Path
    """where the clock and stall files are (bench.nemesis.clock, bench.nemesis.disk)"""

    async def master(self) -> str: ...

    async def controller_leader(self) -> str | None: ...

    async def promoted_after(self, killed: str) -> None: ...

    async def kill_process(self, name: str) -> None: ...

    async def start_process(self, name: str) -> None: ...

    def pause(self, name: str) -> None: ...

    def resume(self, name: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Fault:
    nemesis: Nemesis
    process: str
    began: float
    """time.monotonic() when it was applied"""
    healed: float
    """time.monotonic() when it was healed (the process answers again, or was continued)"""

    @property
    def explains_duplicates(self) -> bool:
        return self.nemesis in EXPLAINS_DUPLICATES


async def apply(processes: Processes, etcd: Etcd, step: Step) -> Fault:
    """Apply one step, hold it, heal it; the Fault says what was hit and when."""
    if step.nemesis in (Nemesis.KILL_ETCD_MEMBER, Nemesis.KILL_ETCD_LEADER):
        return await _kill_etcd_member(etcd, step)
    if step.nemesis in partitions.PARTITIONS:
        cut = await partitions.apply(processes, step)  # type: ignore[arg-type]  # a NetnsCluster
        return Fault(step.nemesis, cut.target, cut.began, cut.healed)
    name = await target(processes, step.nemesis, step.etcd_member)
    if step.nemesis in CLOCK_STEPS:
        clock.set_offset(processes.data_dir, name, CLOCK_STEPS[step.nemesis])
        began = time.monotonic()
        await asyncio.sleep(step.hold_s)
        clock.set_offset(processes.data_dir, name, 0)
        return Fault(step.nemesis, name, began, time.monotonic())
    if step.nemesis is Nemesis.STALL_DISK:
        disk.stall(processes.data_dir, name)
        began = time.monotonic()
        await asyncio.sleep(step.hold_s)
        disk.release(processes.data_dir, name)
        return Fault(step.nemesis, name, began, time.monotonic())
    if step.nemesis is Nemesis.STOP_MASTER:
        processes.pause(name)
        began = time.monotonic()
        await asyncio.sleep(step.hold_s)
        processes.resume(name)
        return Fault(step.nemesis, name, began, time.monotonic())
    await processes.kill_process(name)
    began = time.monotonic()
    await asyncio.sleep(step.hold_s)
    if step.nemesis is Nemesis.KILL_MASTER:
        await processes.promoted_after(name)  # it returns as its old slave's slave
    await processes.start_process(name)
    return Fault(step.nemesis, name, began, time.monotonic())


async def target(processes: Processes, nemesis: Nemesis, which: int = 0) -> str:
    """The process a nemesis hits, as the cluster stands now (`which`: of clock.TARGETS, for a clock step)."""
    if nemesis in CLOCK_STEPS:
        nemesis = CLOCK_TARGETS[which % len(CLOCK_TARGETS)]
    if nemesis in (Nemesis.KILL_MASTER, Nemesis.STOP_MASTER, Nemesis.KILL_SLAVE, Nemesis.STALL_DISK):
        master = await processes.master()
        return master if nemesis is not Nemesis.KILL_SLAVE else next(b for b in BROKERS if b != master)
    if nemesis in (Nemesis.KILL_CONTROLLER_LEADER, Nemesis.KILL_NAMESERVER):
        leader = await processes.controller_leader() or processes.nameserver_names[0]
        if nemesis is Nemesis.KILL_CONTROLLER_LEADER:
            return leader
        return next(n for n in processes.nameserver_names if n != leader)
    return "gateway"


async def _kill_etcd_member(etcd: Etcd, step: Step) -> Fault:
    if step.nemesis is Nemesis.KILL_ETCD_LEADER:
        member: EtcdMember = await asyncio.to_thread(etcd.leader)
    else:
        member = etcd.members[step.etcd_member % len(etcd.members)]
    member.kill()
    began = time.monotonic()
    await asyncio.sleep(step.hold_s)
    member.start()
    await asyncio.to_thread(etcd.wait_healthy, [member])
    return Fault(step.nemesis, f"etcd {member.name}", began, time.monotonic())
