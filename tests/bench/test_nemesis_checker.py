"""The nemesis checker (issue 27) on made-up records of answers: what it must call lost, explained, unexplained."""

from __future__ import annotations

from bench.nemesis.checker import ETCD_ELECTION_S, FAILOVER_AIM_S, NO_PAUSE_S, Epochs, RoundLog, Stored, check
from bench.nemesis.faults import Fault
from bench.nemesis.plan import Nemesis, Round, Step, rounds
from bench.nemesis.workload import Answered, Send, Try

KILL_MASTER = Round(1, (Step(Nemesis.KILL_MASTER, 0.0, 1.0),))
KILL_ETCD = Round(1, (Step(Nemesis.KILL_ETCD_MEMBER, 0.0, 1.0),))


def answered(body: str, message_id: str, at: float, offset: int, tries: int = 1) -> Send:
    send = Send(body, [Try(at - 0.1 - n, at - n, 503, "not-master") for n in range(tries - 1, 0, -1)])
    send.tries.append(Try(at - 0.01, at, 201))
    send.answered = Answered(message_id, "broker-a", 0, offset, at)
    return send


def a_round(plan: Round, *faults: Fault) -> RoundLog:
    return RoundLog(plan, began=0.0, ended=10.0, faults=list(faults))


def test_an_answered_send_that_is_not_stored_is_lost_and_fails_the_run() -> None:
    sends = [answered(f"m{n}", f"id{n}", 1.0 + n, n) for n in range(3)]
    stored = [Stored("id0", "m0", 0, 0), Stored("id2", "m2", 0, 2)]  # id1 was answered, then lost

    verdict = check(
        7, sends, stored, [a_round(KILL_MASTER, Fault(Nemesis.KILL_MASTER, "broker-a", 1.5, 2.5))], Epochs()
    )

    assert not verdict.ok
    assert verdict.total("answered") == 3
    assert verdict.total("lost") == 1
    assert any("LOST" in f and "id1" in f for f in verdict.failures)
    assert verdict.report().startswith("nemesis seed 7")
    assert "FAILED (seed 7)" in verdict.report()


def test_every_answered_send_stored_is_ok() -> None:
    sends = [answered(f"m{n}", f"id{n}", 1.0 + n, n) for n in range(3)]
    stored = [Stored(f"id{n}", f"m{n}", 0, n) for n in range(3)]

    verdict = check(
        7, sends, stored, [a_round(KILL_MASTER, Fault(Nemesis.KILL_MASTER, "broker-a", 1.5, 2.5))], Epochs()
    )

    assert verdict.ok, verdict.report()
    assert verdict.rounds[0].longest_gap_s == 7.0  # from the last answer (3.0) to the round's end (10.0)


def test_a_duplicate_after_a_repeat_during_a_crash_is_explained() -> None:
    sends = [answered("m0", "id0", 3.0, 0, tries=2)]
    stored = [Stored("id0", "m0", 0, 0), Stored("id0b", "m0", 0, 1)]

    verdict = check(
        7, sends, stored, [a_round(KILL_MASTER, Fault(Nemesis.KILL_MASTER, "broker-a", 1.5, 2.5))], Epochs()
    )

    assert verdict.ok, verdict.report()
    assert (verdict.total("explained"), verdict.total("unexplained")) == (1, 0)


def test_a_duplicate_with_no_crash_or_lease_on_its_path_is_unexplained() -> None:
    sends = [answered("m0", "id0", 3.0, 0, tries=2)]
    stored = [Stored("id0", "m0", 0, 0), Stored("id0b", "m0", 0, 1)]
    etcd_member = Fault(Nemesis.KILL_ETCD_MEMBER, "etcd m1", 1.5, 2.5)

    verdict = check(7, sends, stored, [a_round(KILL_ETCD, etcd_member)], Epochs())

    assert not verdict.ok
    assert verdict.total("unexplained") == 1


def test_two_brokers_master_of_one_epoch_fail_the_run() -> None:
    epochs = Epochs({"broker-a": [(1, 0), (2, 500)], "broker-a@1": [(1, 0), (2, 800)]}, {"broker-a": {1, 2}})
    epochs.mastered["broker-a@1"] = {2}

    verdict = check(7, [], [], [], epochs)

    assert any("EPOCH 2 has two masters" in f for f in verdict.failures)
    assert any("EPOCH 2 begins at different offsets" in f for f in verdict.failures)


def test_the_same_seed_plans_the_same_rounds() -> None:
    assert rounds(11, 20, hold_s=4.0) == rounds(11, 20, hold_s=4.0)
    assert rounds(11, 20, hold_s=4.0) != rounds(12, 20, hold_s=4.0)
    assert {step.nemesis for r in rounds(11, len(Nemesis), hold_s=4.0) for step in r.steps} == set(Nemesis)


def test_a_failover_while_etcds_leader_is_down_may_take_etcds_election_longer() -> None:
    """No lease expires and no election ends while etcd has no leader: the two delays add (2.98 s + 1.97 s seen)."""
    master = Fault(Nemesis.KILL_MASTER, "broker-a", 1.5, 2.5)
    together = a_round(KILL_MASTER, master, Fault(Nemesis.KILL_ETCD_LEADER, "etcd m0", 1.6, 2.4))
    long_after = a_round(KILL_MASTER, master, Fault(Nemesis.KILL_ETCD_LEADER, "etcd m0", 30.0, 31.0))
    etcd_alone = a_round(KILL_ETCD, Fault(Nemesis.KILL_ETCD_LEADER, "etcd m0", 1.6, 2.4))

    assert together.aim_s() == FAILOVER_AIM_S + ETCD_ELECTION_S
    assert long_after.aim_s() == FAILOVER_AIM_S
    assert etcd_alone.aim_s() == NO_PAUSE_S
