"""The partition nemeses (issue 27): hosts of the cluster cut from one another, held, and healed.

The cluster runs on test hosts made of network namespaces (tests.support.netns_cluster: e1 e2
e3 the etcd members, n1 n2 the nameservers with their controllers, b1 b2 the brokers, gw the
gateway). A cut between two hosts drops their packets silently both ways and leaves every
other link whole (tests.support.netns.Hosts.cut_between):

- **master from the controller**: the master's host cut from the three etcd members and both
  nameservers; it still reaches its slave and the gateway. Its etcd lease runs out, it fences
  itself, the controller promotes the slave. Held until the promotion, at least the step's hold.
- **master from its slave**: only the link between the two brokers. The master keeps its lease;
  its puts wait for the slave up to the replication timeout, the slave leaves the in-sync set,
  and the master answers alone. Held at least SLAVE_CUT_S, past that timeout.
- **master from all**: the master's host cut from every other host (as the netns partition test
  cuts it): fenced, its slave promoted; the gateway's calls to it time out.
- **etcd minority**: one etcd member (drawn by the step) cut from the other two and from every
  broker, nameserver and the gateway: the two others keep a quorum; whoever spoke to the cut one
  must turn to another member.

A master's partition is healed once its slave is promoted: it then learns the new master and
returns as its slave (the run waits until both are in the in-sync set again).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

from bench.nemesis.plan import Nemesis, Step

ETCD_HOSTS = ("e1", "e2", "e3")
NAMESERVER_HOSTS = ("n1", "n2")
GATEWAY_HOST = "gw"
PARTITIONS = frozenset(
    {
        Nemesis.CUT_MASTER_FROM_CONTROLLER,
        Nemesis.CUT_MASTER_FROM_SLAVE,
        Nemesis.CUT_MASTER_FROM_ALL,
        Nemesis.CUT_ETCD_MINORITY,
    }
)
SLAVE_CUT_S = 5.0
"""A cut between master and slave held at least this long: past the 3 s replication timeout, so the slave leaves."""
PROMOTION_GIVE_UP_S = 20.0


class Partitionable(Protocol):
    """What a partition needs of the cluster (tests.support.netns_cluster.NetnsCluster is one)."""

    async def master(self) -> str: ...

    async def promoted_after(self, killed: str, timeout: float = 30.0) -> None: ...

    def host_of(self, name: str) -> str: ...

    def broker_hosts(self) -> list[str]: ...

    def cut_between(self, a: str, b: str) -> None: ...

    def heal_between(self, a: str, b: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Cut:
    """What a partition cut off (a process, or an etcd member) and when: bench.nemesis.faults makes it a Fault."""

    target: str
    began: float
    healed: float


async def apply(cluster: Partitionable, step: Step) -> Cut:
    """Cut the hosts the step names, hold, heal."""
    master = await cluster.master()
    pairs, who = await _pairs(cluster, step, master)
    for a, b in pairs:
        cluster.cut_between(a, b)
    began = time.monotonic()
    try:
        hold = max(step.hold_s, SLAVE_CUT_S) if step.nemesis is Nemesis.CUT_MASTER_FROM_SLAVE else step.hold_s
        await asyncio.sleep(hold)
        if step.nemesis in (Nemesis.CUT_MASTER_FROM_CONTROLLER, Nemesis.CUT_MASTER_FROM_ALL):
            await cluster.promoted_after(master, timeout=PROMOTION_GIVE_UP_S)
    finally:
        for a, b in pairs:
            cluster.heal_between(a, b)
    return Cut(who, began, time.monotonic())


async def _pairs(cluster: Partitionable, step: Step, master: str) -> tuple[list[tuple[str, str]], str]:
    """The host pairs to cut, and what the Fault calls its target."""
    brokers = cluster.broker_hosts()
    m = cluster.host_of(master)
    slave = next(h for h in brokers if h != m)
    everyone = [*ETCD_HOSTS, *NAMESERVER_HOSTS, *brokers, GATEWAY_HOST]
    if step.nemesis is Nemesis.CUT_MASTER_FROM_CONTROLLER:
        return [(m, h) for h in (*ETCD_HOSTS, *NAMESERVER_HOSTS)], master
    if step.nemesis is Nemesis.CUT_MASTER_FROM_SLAVE:
        return [(m, slave)], master
    if step.nemesis is Nemesis.CUT_MASTER_FROM_ALL:
        return [(m, h) for h in everyone if h != m], master
    member = ETCD_HOSTS[step.etcd_member % len(ETCD_HOSTS)]
    return [(member, h) for h in everyone if h != member], f"etcd m{ETCD_HOSTS.index(member)}"
