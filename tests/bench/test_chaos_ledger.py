"""The chaos Ledger's verdict: what counts as lost, and which duplicates a kill or an expired lease explains."""

from __future__ import annotations

from bench.chaos.killer import TARGETS, schedule
from bench.chaos.ledger import BROKER, GATEWAY, TIMER, Delivery, Fate, Kill, Ledger, Outcome, Sent

A, B = "group-a", "group-b"


def ledger_with(*sent: Sent) -> Ledger:
    ledger = Ledger((A, B), {B: Fate.POISON})
    for s in sent:
        ledger.answered(s)
    return ledger


def delivered(ledger: Ledger, group: str, message_id: str, at: float, outcome: Outcome, lease_s: float = 5) -> None:
    attempt = len(ledger.deliveries.get((group, message_id), [])) + 1
    detail = "ack: lease-ended on try 2" if outcome is Outcome.UNKNOWN else ""
    ledger.delivered(Delivery(group, message_id, attempt, at, at + lease_s, outcome, detail))


def test_an_answered_send_acked_in_one_group_only_is_lost_in_the_other() -> None:
    ledger = ledger_with(Sent("m1", "single", Fate.OK, 0.0, 1.0))
    delivered(ledger, A, "m1", 2.0, Outcome.ACKED)

    verdict = ledger.verdict({}, {})

    assert (verdict.figures[f"{A}: lost"], verdict.figures[f"{B}: lost"]) == (0, 1)
    assert verdict.failures[0].startswith(f"LOST in {B}: m1")


def test_poison_must_reach_the_dlq_with_a_reason_and_a_rollback_must_never_be_delivered() -> None:
    ledger = ledger_with(
        Sent("p", "single", Fate.POISON, 0.0, 1.0),
        Sent("r", "tx-rollback", Fate.OK, 0.0, 1.0, transaction_id="b:r", rollback=True),
    )
    delivered(ledger, A, "p", 2.0, Outcome.ACKED)
    delivered(ledger, B, "r", 2.0, Outcome.ACKED)

    verdict = ledger.verdict({B: {"p": ""}}, {"b:r": "ROLLED_BACK"})

    assert verdict.figures[f"{B}: lost"] == 0
    assert [f.split(":")[0] for f in verdict.failures] == ["DLQ of group-b", "ROLLED-BACK DELIVERED in group-b"]


def test_a_duplicate_is_explained_by_an_expired_lease_or_a_kill_on_its_path_and_else_fails() -> None:
    ledger = ledger_with(
        *(Sent(m, "single", Fate.OK, 0.0, 1.0) for m in ("lease", "killed", "retried")),
        Sent("bare", "single", Fate.OK, 5.0, 5.1),
    )
    delivered(ledger, A, "lease", 2.0, Outcome.UNKNOWN, lease_s=5)
    delivered(ledger, A, "lease", 7.5, Outcome.ACKED)  # after the unacked lease ran out
    delivered(ledger, A, "killed", 2.0, Outcome.ACKED)
    delivered(ledger, A, "killed", 4.0, Outcome.ACKED)  # the broker died in between
    delivered(ledger, A, "retried", 2.0, Outcome.NACKED)
    delivered(ledger, A, "retried", 2.5, Outcome.ACKED)  # a retry, not a duplicate
    delivered(ledger, A, "bare", 6.0, Outcome.ACKED)
    delivered(ledger, A, "bare", 8.0, Outcome.ACKED)  # only the gateway died since its send: not on its path
    ledger.killed(Kill(BROKER, 3.0, 3.5))
    ledger.killed(Kill(GATEWAY, 7.0, 7.5))

    verdict = ledger.verdict({}, {})

    assert dict(verdict.explained) == {"lease expired": 1, f"kill of {BROKER}": 1, "unexplained": 1}
    assert (verdict.figures["duplicates explained"], verdict.figures["duplicates unexplained"]) == (2, 1)
    duplicates = [f for f in verdict.failures if f.startswith("UNEXPLAINED DUPLICATE")]
    assert len(duplicates) == 1
    assert duplicates[0].startswith(f"UNEXPLAINED DUPLICATE in {A}: bare")


def test_a_delayed_message_repeated_after_a_timer_kill_is_explained_by_it() -> None:
    ledger = ledger_with(Sent("d", "delayed", Fate.OK, 0.0, 1.0))
    delivered(ledger, A, "d", 2.0, Outcome.ACKED)
    delivered(ledger, A, "d", 4.0, Outcome.ACKED)
    ledger.killed(Kill(TIMER, 1.5, 3.0))

    assert dict(ledger.verdict({}, {}).explained) == {f"kill of {TIMER}": 1}


def test_the_kill_schedule_comes_from_the_seed_alone_and_kills_every_target() -> None:
    plan = schedule(42, 30.0, 6)

    assert plan == schedule(42, 30.0, 6)
    assert plan != schedule(43, 30.0, 6)
    assert {p.process for p in plan} == set(TARGETS)
    assert all(3.0 <= p.at_s <= 27.0 for p in plan)
    assert [p.at_s for p in plan] == sorted(p.at_s for p in plan)


def test_a_repeated_retry_is_explained_by_a_timer_kill_even_when_its_first_delivery_was_never_seen() -> None:
    ledger = ledger_with(Sent("r", "single", Fate.OK, 0.0, 1.0))
    ledger.delivered(Delivery(A, "r", 2, 9.0, 15.0, Outcome.ACKED))
    ledger.delivered(Delivery(A, "r", 2, 9.0, 15.0, Outcome.ACKED))  # two copies of one retry, one receive
    ledger.killed(Kill(TIMER, 5.0, 8.0))

    assert dict(ledger.verdict({}, {}).explained) == {f"kill of {TIMER}": 1}
