"""The chaos run's Ledger: every answered send, every delivery, every kill, and the verdict over them.

A send counts only once it was answered 2xx ("answered"); the body says what each
group does with the message (`Fate`) and, for a transaction, which outcome the
producer and its check-back receiver choose. At the end, each answered message is
accounted for in each group: delivered (acked), in the group's DLQ with a reason, or
rolled back (never delivered). A delivery that follows one that was not nacked is a
duplicate: it is explained by an expired lease (the previous lease ran out unacked)
or by a kill -9 of a process on the message's path between its send and the
duplicate; any other duplicate is a failure.
"""

from __future__ import annotations

import enum
import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field

LEASE_SLACK_S = 0.25
"""Clock slack when comparing a receive time with the previous lease's end (one machine, two clocks)."""

BROKER, TIMER, TXCHECK, GATEWAY = "broker-a", "timer", "txcheck-worker", "gateway"


class Fate(enum.StrEnum):
    OK = "ok"
    """Both groups ack it at the first delivery."""
    FLAKY = "flaky"
    """Group A nacks its first delivery and acks the retry; group B acks it."""
    POISON = "poison"
    """Group A acks it; group B nacks it every time, until it reaches B's DLQ."""


class Outcome(enum.StrEnum):
    ACKED = "acked"
    NACKED = "nacked"
    REFUSED = "refused"
    """The ack or nack was answered, but not ok for this handle (e.g. a stale lease)."""
    UNKNOWN = "unknown"
    """No answer, or refused on a repeat whose first try's answer was lost: it may have taken effect."""
    PENDING = "pending"


@dataclass(slots=True)
class Sent:
    message_id: str
    kind: str
    """single, batch, delayed, tx-commit, tx-rollback, tx-checkback"""
    fate: Fate
    started_at: float
    """wall time (s) when the first attempt of the send began"""
    answered_at: float
    transaction_id: str | None = None
    rollback: bool = False
    """a transaction whose outcome is ROLLBACK: it must never be delivered"""

    @property
    def delayed(self) -> bool:
        return self.kind == "delayed"


@dataclass(slots=True)
class Delivery:
    group: str
    message_id: str
    attempt: int
    received_at: float
    invisible_until: float
    outcome: Outcome = Outcome.PENDING
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Kill:
    process: str
    killed_at: float
    restarted_at: float


@dataclass(slots=True)
class Verdict:
    figures: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    explained: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(slots=True)
class Ledger:
    groups: tuple[str, str]
    refuses: dict[str, Fate]
    """group -> the fate it nacks every time: such messages must end in its DLQ"""
    sent: dict[str, Sent] = field(default_factory=dict)
    deliveries: dict[tuple[str, str], list[Delivery]] = field(default_factory=lambda: defaultdict(list))
    kills: list[Kill] = field(default_factory=list)
    attempts: Counter[str] = field(default_factory=Counter)
    """sends tried, by kind (answered or not)"""
    operations: Counter[str] = field(default_factory=Counter)
    """HTTP requests made, by operation"""

    def answered(self, sent: Sent) -> None:
        self.sent[sent.message_id] = sent

    def delivered(self, delivery: Delivery) -> None:
        self.deliveries[(delivery.group, delivery.message_id)].append(delivery)

    def killed(self, kill: Kill) -> None:
        self.kills.append(kill)

    def acked_in(self, group: str, message_id: str) -> bool:
        """Acked, or an ack was tried and its answer lost or refused (then only the group's lag tells)."""
        return any(
            d.outcome == Outcome.ACKED
            or (d.outcome in (Outcome.REFUSED, Outcome.UNKNOWN) and d.detail.startswith("ack:"))
            for d in self.deliveries.get((group, message_id), [])
        )

    def unaccounted(self, group: str, dead: dict[str, str]) -> list[Sent]:
        """Answered messages the group has not acked, or not dead-lettered when it refuses them (rollbacks excepted)."""
        refused = self.refuses.get(group)
        return [
            s
            for s in self.sent.values()
            if not s.rollback
            and not (s.message_id in dead if s.fate == refused else self.acked_in(group, s.message_id))
        ]

    def verdict(self, dead: dict[str, dict[str, str]], tx_states: dict[str, str]) -> Verdict:
        """Account for every answered send in every group; `dead` is each group's DLQ: message id -> reason."""
        verdict = Verdict()
        self._figures(verdict, dead)
        for group in self.groups:
            self._account(group, dead.get(group, {}), verdict)
        self._transactions(tx_states, verdict)
        for (group, message_id), seen in self.deliveries.items():
            sent = self.sent.get(message_id)
            if sent is not None:
                self._duplicates(group, sent, sorted(seen, key=lambda d: d.received_at), verdict)
        verdict.figures["duplicates explained"] = sum(verdict.explained.values())
        verdict.figures["duplicates unexplained"] = verdict.explained.get("unexplained", 0)
        verdict.figures["duplicates explained"] -= verdict.figures["duplicates unexplained"]
        return verdict

    def _figures(self, verdict: Verdict, dead: dict[str, dict[str, str]]) -> None:
        f = verdict.figures
        f["operations"] = sum(self.operations.values())
        f["sends tried"] = sum(self.attempts.values())
        f["sends answered"] = len(self.sent)
        f["rolled back"] = sum(1 for s in self.sent.values() if s.rollback)
        for process in (BROKER, TIMER, TXCHECK, GATEWAY):
            f[f"kills: {process}"] = sum(1 for k in self.kills if k.process == process)
        for group in self.groups:
            f[f"{group}: delivered"] = sum(1 for s in self.sent.values() if self.acked_in(group, s.message_id))
            f[f"{group}: in DLQ"] = sum(1 for m in dead.get(group, {}) if m in self.sent)
        # an unanswered send (or a repeated transaction begin) that was stored after all
        f["deliveries of unanswered sends"] = sum(1 for _, m in self.deliveries if m not in self.sent)

    def _account(self, group: str, dead: dict[str, str], verdict: Verdict) -> None:
        lost = self.unaccounted(group, dead)
        verdict.figures[f"{group}: lost"] = len(lost)
        for s in lost[:20]:
            seen = self.deliveries.get((group, s.message_id), [])
            verdict.failures.append(
                f"LOST in {group}: {s.message_id} ({s.kind}, {s.fate}, answered at {s.answered_at:.3f}); "
                f"deliveries: {[(d.attempt, round(d.received_at, 3), str(d.outcome), d.detail) for d in seen]}"
            )
        for message_id, reason in dead.items():
            if message_id in self.sent and not reason:
                verdict.failures.append(f"DLQ of {group}: {message_id} has no reason")
        for s in self.sent.values():
            if s.rollback and self.deliveries.get((group, s.message_id)):
                verdict.failures.append(f"ROLLED-BACK DELIVERED in {group}: {s.message_id} ({s.transaction_id})")

    def _transactions(self, tx_states: dict[str, str], verdict: Verdict) -> None:
        for s in self.sent.values():
            if s.transaction_id is None:
                continue
            want = "ROLLED_BACK" if s.rollback else "COMMITTED"
            got = tx_states.get(s.transaction_id, "not asked")
            if got != want:
                verdict.failures.append(f"TRANSACTION {s.transaction_id} ({s.kind}) is {got}, expected {want}")

    def _duplicates(self, group: str, sent: Sent, seen: list[Delivery], verdict: Verdict) -> None:
        retried = False
        for previous, delivery in itertools.pairwise(seen):
            if previous.outcome == Outcome.NACKED or _maybe_nacked(previous):
                retried = True
                continue
            # a retry (attempt > 1) travelled through the timer, even when its first delivery was never seen
            path = self._path(sent, retried or previous.outcome != Outcome.ACKED or delivery.attempt > 1)
            why = self._explain(sent, previous, delivery, path)
            verdict.explained[why] += 1
            if why == "unexplained":
                verdict.failures.append(
                    f"UNEXPLAINED DUPLICATE in {group}: {sent.message_id} ({sent.kind}) delivered at "
                    f"{previous.received_at:.3f} (attempt {previous.attempt}, {previous.outcome} {previous.detail}, "
                    f"lease until {previous.invisible_until:.3f}) and again at {delivery.received_at:.3f} "
                    f"(attempt {delivery.attempt}); no kill of {sorted(path)} since its send"
                )

    def _explain(self, sent: Sent, previous: Delivery, delivery: Delivery, path: set[str]) -> str:
        if previous.outcome != Outcome.ACKED and delivery.received_at >= previous.invisible_until - LEASE_SLACK_S:
            return "lease expired"
        for kill in self.kills:
            if kill.process in path and sent.started_at <= kill.killed_at <= delivery.received_at:
                return f"kill of {kill.process}"
        return "unexplained"

    @staticmethod
    def _path(sent: Sent, retried: bool) -> set[str]:
        """The processes a crash of which can repeat this message."""
        path = {BROKER}
        if sent.delayed or retried:
            path.add(TIMER)
        if sent.transaction_id is not None:
            path.add(TXCHECK)
        return path


def _maybe_nacked(delivery: Delivery) -> bool:
    """A nack whose answer was lost (the gateway died) and whose repeat was refused: it may have taken effect."""
    return delivery.outcome == Outcome.UNKNOWN and delivery.detail.startswith("nack:")
