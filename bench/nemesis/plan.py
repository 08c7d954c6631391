"""The rounds of a nemesis run, drawn from its seed alone: the same seed replays the same rounds.

A round applies one nemesis, or two mixed (begun together, the second a little later). Two are
never mixed when together they take more than one process of a kind the promise covers
(both brokers of the broker name, both nameservers, two etcd members): the promise is that any
one process may fail.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass


class Nemesis(enum.StrEnum):
    KILL_MASTER = "kill -9 master"
    KILL_SLAVE = "kill -9 slave"
    KILL_CONTROLLER_LEADER = "kill -9 controller leader"
    KILL_NAMESERVER = "kill -9 nameserver (not leading)"
    KILL_ETCD_MEMBER = "kill -9 etcd member"
    KILL_ETCD_LEADER = "kill -9 etcd leader"
    KILL_GATEWAY = "kill -9 gateway"
    STOP_MASTER = "SIGSTOP master 10 s"
    CLOCK_FORWARD = "wall clock +1 h on one process"
    CLOCK_BACK = "wall clock -1 h on one process"
    STALL_DISK = "stalled disk on the master"
    CUT_MASTER_FROM_CONTROLLER = "master cut from etcd and nameservers"
    CUT_MASTER_FROM_SLAVE = "master cut from its slave"
    CUT_MASTER_FROM_ALL = "master cut from all"
    CUT_ETCD_MINORITY = "etcd member cut off (minority)"


NEMESES = tuple(Nemesis)
KIND = {
    Nemesis.KILL_MASTER: "broker",
    Nemesis.KILL_SLAVE: "broker",
    Nemesis.STOP_MASTER: "broker",
    Nemesis.KILL_CONTROLLER_LEADER: "nameserver",
    Nemesis.KILL_NAMESERVER: "nameserver",
    Nemesis.KILL_ETCD_MEMBER: "etcd",
    Nemesis.KILL_ETCD_LEADER: "etcd",
    Nemesis.KILL_GATEWAY: "gateway",
    Nemesis.CLOCK_FORWARD: "clock",
    Nemesis.CLOCK_BACK: "clock",
    Nemesis.STALL_DISK: "broker",
    Nemesis.CUT_MASTER_FROM_CONTROLLER: "broker",
    Nemesis.CUT_MASTER_FROM_SLAVE: "broker",
    Nemesis.CUT_MASTER_FROM_ALL: "broker",
    Nemesis.CUT_ETCD_MINORITY: "etcd",
}
STOP_SECONDS = 10.0
"""How long SIGSTOP holds the master (five times its lease)."""
CLOCK_SECONDS = 5.0
"""How long a clock step lasts (bench.nemesis.clock): past a master's lease (2 s) and the controller's timeout."""
STALL_SECONDS = 4.0
"""How long the master's disk stalls (bench.nemesis.disk): past the nemesis brokers' SYNC_FLUSH timeout (2 s)."""
HOLD_SECONDS = {Nemesis.STOP_MASTER: STOP_SECONDS, Nemesis.CLOCK_FORWARD: CLOCK_SECONDS,
                Nemesis.CLOCK_BACK: CLOCK_SECONDS, Nemesis.STALL_DISK: STALL_SECONDS}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Step:
    nemesis: Nemesis
    after_s: float
    """seconds after the round's faults begin"""
    hold_s: float
    """seconds it lasts before it is healed (a killed process started again, a stopped one continued)"""
    etcd_member: int = 0
    """which etcd member, for KILL_ETCD_MEMBER; which process (bench.nemesis.faults.CLOCK_TARGETS), for a clock step"""


@dataclass(frozen=True, slots=True)
class Round:
    number: int
    steps: tuple[Step, ...]

    @property
    def name(self) -> str:
        return " + ".join(step.nemesis for step in self.steps)


def rounds(seed: int, count: int, *, hold_s: float, members: int = 3, only: tuple[Nemesis, ...] = ()) -> list[Round]:
    """`count` rounds: every nemesis alone first (in a seeded order, as far as `count` goes), then mixed ones.
    `only`: these nemeses and no others (mixed ones only where two of them are of different kinds)."""
    rng = random.Random(f"{seed}:nemesis")
    pool = only or NEMESES
    alone = list(pool)
    rng.shuffle(alone)
    mixable = len({KIND[n] for n in pool}) > 1
    planned: list[Round] = []
    for number in range(1, count + 1):
        if number <= len(alone) or not mixable:
            chosen = [alone[(number - 1) % len(alone)]]
        else:
            first = rng.choice(pool)
            second = rng.choice([n for n in pool if KIND[n] != KIND[first]])
            chosen = [first, second]
        steps = tuple(
            Step(
                nemesis,
                0.0 if i == 0 else round(rng.uniform(0.0, 1.0), 2),
                HOLD_SECONDS.get(nemesis) or round(rng.uniform(0.5, 1.0) * hold_s, 2),
                rng.randrange(members),
            )
            for i, nemesis in enumerate(chosen)
        )
        planned.append(Round(number, steps))
    return planned
