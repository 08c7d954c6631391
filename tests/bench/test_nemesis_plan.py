"""The nemesis run's plan (bench.nemesis.plan): every nemesis alone first, the same seed the same rounds, `only`."""

from __future__ import annotations

from bench.nemesis.plan import HOLD_SECONDS, KIND, NEMESES, Nemesis, rounds


def test_every_nemesis_comes_alone_first_then_mixed_of_two_kinds() -> None:
    planned = rounds(2027, len(NEMESES) + 10, hold_s=4.0)

    assert sorted(r.steps[0].nemesis for r in planned[: len(NEMESES)]) == sorted(NEMESES)
    assert all(len(r.steps) == 1 for r in planned[: len(NEMESES)])
    assert all(
        len(r.steps) == 2 and KIND[r.steps[0].nemesis] != KIND[r.steps[1].nemesis] for r in planned[len(NEMESES) :]
    )
    assert planned == rounds(2027, len(NEMESES) + 10, hold_s=4.0)


def test_clock_steps_and_stalls_last_their_fixed_time() -> None:
    steps = [s for r in rounds(5, 40, hold_s=4.0) for s in r.steps]

    for nemesis in (Nemesis.CLOCK_FORWARD, Nemesis.CLOCK_BACK, Nemesis.STALL_DISK):
        assert {s.hold_s for s in steps if s.nemesis is nemesis} == {HOLD_SECONDS[nemesis]}


def test_only_draws_from_the_nemeses_given() -> None:
    leader_only = rounds(11, 6, hold_s=4.0, only=(Nemesis.KILL_ETCD_LEADER,))
    two = rounds(11, 8, hold_s=4.0, only=(Nemesis.KILL_MASTER, Nemesis.CLOCK_FORWARD))

    assert [[s.nemesis for s in r.steps] for r in leader_only] == [[Nemesis.KILL_ETCD_LEADER]] * 6
    assert {s.nemesis for r in two for s in r.steps} == {Nemesis.KILL_MASTER, Nemesis.CLOCK_FORWARD}
