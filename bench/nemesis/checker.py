"""The nemesis run's checker: what was answered 2xx against what the cluster holds after healing, round by round.

- **lost**: an answered message id that no stored message has (read back after every fault healed);
- **duplicates**: a body stored at more than one place. One is explained when its send was tried
  more than once while a fault that can store a send without answering it was on (a crash on the
  write path, a master stopped past its lease: `Fault.explains_duplicates`); any other is
  unexplained;
- **epochs**: each epoch has one master: no two brokers' logs say they were master of the same
  epoch, and where two brokers' epoch histories (`epochs.json`) hold the same epoch it begins at
  the same CommitLog offset in both (the records of an epoch were written by one broker);
- **unavailability**: the longest time in a round without an answered send, beside the aim of its
  nemeses; sends that never resumed after the round's faults were healed fail the round.

Any lost send, unexplained duplicate, epoch with two masters or round whose sends never resumed is
a failure (`Verdict.ok` false; the command exits 1).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from bench.nemesis.faults import Fault
from bench.nemesis.plan import Nemesis, Round
from bench.nemesis.workload import Send

NO_PAUSE_S = 1.0
"""The aim "0 s" as measured: a gap under this is sends paced and answered as usual."""
FAILOVER_AIM_S = 3.0
AIM_S = {
    Nemesis.KILL_MASTER: FAILOVER_AIM_S,
    Nemesis.STOP_MASTER: FAILOVER_AIM_S,
    Nemesis.KILL_SLAVE: 4.0,
    Nemesis.KILL_CONTROLLER_LEADER: NO_PAUSE_S,
    Nemesis.KILL_NAMESERVER: NO_PAUSE_S,
    Nemesis.KILL_ETCD_MEMBER: NO_PAUSE_S,
    Nemesis.KILL_ETCD_LEADER: NO_PAUSE_S,
    Nemesis.CLOCK_FORWARD: NO_PAUSE_S,
    Nemesis.CLOCK_BACK: NO_PAUSE_S,
    Nemesis.CUT_MASTER_FROM_CONTROLLER: FAILOVER_AIM_S,
    Nemesis.CUT_MASTER_FROM_SLAVE: 4.0,
    Nemesis.CUT_MASTER_FROM_ALL: FAILOVER_AIM_S,
    Nemesis.CUT_ETCD_MINORITY: NO_PAUSE_S,
}
"""The longest time without an answered send each nemesis may cause: a master's failover < 3 s (issue 27); a slave's
loss, the replication timeout (3 s) before the master stops waiting for it; the rest, no pause. The gateway's: the time
it is down, plus 2 s to start again; a stalled disk's: the stall, plus a second for the sends resent after it."""
AFTER_HEAL_S = {Nemesis.KILL_GATEWAY: 2.0, Nemesis.STALL_DISK: 1.0}

ETCD_ELECTION_S = 2.0
"""How long etcd's members take to elect a leader after theirs was killed (docs/replication.md: 1 to 2 s here). No
lease expires and no controller election ends without one, so a failover overlapping it waits that much longer."""
FAILOVERS = frozenset(n for n, aim in AIM_S.items() if aim == FAILOVER_AIM_S)


@dataclass(frozen=True, slots=True)
class Stored:
    message_id: str
    body: str
    queue_id: int
    queue_offset: int


@dataclass(slots=True)
class RoundLog:
    round: Round
    began: float
    """time.monotonic() when its window began (the load running, no fault yet)"""
    ended: float
    faults: list[Fault] = field(default_factory=list)

    @property
    def healed(self) -> float:
        return max((f.healed for f in self.faults), default=self.began)

    def aim_s(self) -> float:
        """The largest of its faults' aims; a failover's grows by etcd's election when etcd's leader was killed
        while it ran (from the failover's start to its aim), since the two delays add."""
        aims = [
            (f.healed - f.began + AFTER_HEAL_S[f.nemesis]) if f.nemesis in AFTER_HEAL_S else AIM_S[f.nemesis]
            for f in self.faults
        ]
        elections = [f for f in self.faults if f.nemesis is Nemesis.KILL_ETCD_LEADER]
        for fault, aim in zip(self.faults, list(aims), strict=True):
            if fault.nemesis in FAILOVERS and any(
                e.began <= fault.healed + aim and fault.began <= e.healed + ETCD_ELECTION_S for e in elections
            ):
                aims.append(aim + ETCD_ELECTION_S)
        return max(aims, default=NO_PAUSE_S)


@dataclass(slots=True)
class Epochs:
    histories: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """broker -> its epochs.json: (epoch, the CommitLog offset it began at)"""
    mastered: dict[str, set[int]] = field(default_factory=dict)
    """broker -> the epochs its log says it was master of"""


@dataclass(slots=True)
class RoundFigures:
    number: int
    name: str
    answered: int = 0
    lost: int = 0
    explained: int = 0
    unexplained: int = 0
    longest_gap_s: float = 0.0
    aim_s: float = 0.0
    resumed_s: float | None = None
    """seconds from the round's last heal to its first answered send after it (None: none came)"""

    def line(self) -> str:
        above = "" if self.longest_gap_s <= self.aim_s else "  ABOVE AIM"
        resumed = "never" if self.resumed_s is None else f"{self.resumed_s:.2f} s"
        return (
            f"round {self.number:>2} {self.name:<52} answered {self.answered:>5}  lost {self.lost}  "
            f"duplicates {self.explained}/{self.unexplained}  longest without an answer {self.longest_gap_s:.2f} s "
            f"(aim {self.aim_s:.1f} s){above}  resumed after heal {resumed}"
        )


@dataclass(slots=True)
class Verdict:
    seed: int
    rounds: list[RoundFigures] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    moved: int = 0
    """answered sends found at another queue or offset than answered (info)"""

    @property
    def ok(self) -> bool:
        return not self.failures

    def total(self, name: str) -> int:
        return sum(getattr(r, name) for r in self.rounds)

    def report(self) -> str:
        lines = [f"nemesis seed {self.seed}"]
        lines += [r.line() for r in self.rounds]
        gap = max((r.longest_gap_s for r in self.rounds), default=0.0)
        lines.append(
            f"total: answered {self.total('answered')}  lost {self.total('lost')}  duplicates "
            f"{self.total('explained')} explained / {self.total('unexplained')} unexplained  "
            f"longest without an answer {gap:.2f} s  stored elsewhere than answered {self.moved}"
        )
        lines += [f"FAILURE: {f}" for f in self.failures[:40]]
        if len(self.failures) > 40:
            lines.append(f"... and {len(self.failures) - 40} more failures")
        lines.append(f"nemesis {'ok' if self.ok else 'FAILED'} (seed {self.seed})")
        return "\n".join(lines)


def check(seed: int, sends: list[Send], stored: list[Stored], rounds: list[RoundLog], epochs: Epochs) -> Verdict:
    verdict = Verdict(seed)
    by_id = {s.message_id: s for s in stored}
    places: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for s in stored:
        places[s.body].add((s.queue_id, s.queue_offset))
    for log in rounds:
        verdict.rounds.append(_round(log, _sends_of(log, rounds, sends), by_id, places, verdict))
    _epochs(epochs, verdict)
    return verdict


def _sends_of(log: RoundLog, rounds: list[RoundLog], sends: list[Send]) -> list[Send]:
    """The sends first tried in the round's window (before the first round: the first's; after the last: the last's)."""
    index = rounds.index(log)
    low = float("-inf") if index == 0 else log.began
    high = float("inf") if index == len(rounds) - 1 else rounds[index + 1].began
    return [s for s in sends if s.tries and low <= s.first_sent_at < high]


def _round(
    log: RoundLog,
    sends: list[Send],
    by_id: dict[str, Stored],
    places: dict[str, set[tuple[int, int]]],
    verdict: Verdict,
) -> RoundFigures:
    figures = RoundFigures(log.round.number, log.round.name, aim_s=log.aim_s())
    for send in sends:
        answer = send.answered
        if answer is not None:
            figures.answered += 1
            found = by_id.get(answer.message_id)
            if found is None or found.body != send.body:
                figures.lost += 1
                verdict.failures.append(
                    f"LOST in round {log.round.number}: {answer.message_id} ({send.body!r}) answered by "
                    f"{answer.broker} at queue {answer.queue_id} offset {answer.queue_offset}; "
                    f"{'not stored' if found is None else f'that id holds {found.body!r}'}"
                )
            elif (found.queue_id, found.queue_offset) != (answer.queue_id, answer.queue_offset):
                verdict.moved += 1
        copies = len(places.get(send.body, ()))
        if copies > 1:
            if _explained(send, log.faults):
                figures.explained += copies - 1
            else:
                figures.unexplained += copies - 1
                verdict.failures.append(
                    f"UNEXPLAINED DUPLICATE in round {log.round.number}: {send.body!r} stored at "
                    f"{sorted(places[send.body])} after {len(send.tries)} tries "
                    f"({[(t.status, t.problem) for t in send.tries][:5]}); faults: "
                    f"{[(f.nemesis.value, f.process) for f in log.faults]}"
                )
    answered_at = sorted(s.answered.at for s in sends if s.answered is not None)
    moments = [log.began, *[a for a in answered_at if log.began <= a <= log.ended], log.ended]
    figures.longest_gap_s = max((b - a for a, b in itertools.pairwise(moments)), default=0.0)
    after_heal = [a for a in answered_at if a >= log.healed]
    figures.resumed_s = after_heal[0] - log.healed if after_heal else None
    if figures.resumed_s is None:
        verdict.failures.append(f"round {log.round.number} ({log.round.name}): no send was answered after healing")
    return figures


def _explained(send: Send, faults: list[Fault]) -> bool:
    """Tried more than once, while a fault that can store a send unanswered was on."""
    if len(send.tries) < 2:
        return False
    return any(
        f.explains_duplicates and f.began <= send.last_done_at and send.first_sent_at <= f.healed for f in faults
    )


def _epochs(epochs: Epochs, verdict: Verdict) -> None:
    masters: dict[int, list[str]] = defaultdict(list)
    for broker, mastered in epochs.mastered.items():
        for epoch in mastered:
            masters[epoch].append(broker)
    for epoch, brokers in sorted(masters.items()):
        if len(brokers) > 1:
            verdict.failures.append(f"EPOCH {epoch} has two masters: {sorted(brokers)} (their logs)")
    begins: dict[int, set[int]] = defaultdict(set)
    for history in epochs.histories.values():
        for epoch, start in history:
            begins[epoch].add(start)
    for epoch, starts in sorted(begins.items()):
        if len(starts) > 1:
            verdict.failures.append(f"EPOCH {epoch} begins at different offsets in the brokers' histories: {starts}")
