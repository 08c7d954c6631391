"""The nemesis run's quick version (issue 27): two short rounds of seeded faults on a replicated cluster.

`petrel bench nemesis --quick` in the suite: broker-a a SYNC_MASTER with a slave, two nameservers
running the controller, three etcd members, a set workload through the gateway, each process on a
test host made of a network namespace (tests.support.netns_cluster); each round applies a nemesis
drawn from the seed (kill -9 of the master, the slave, a nameserver or the controller leader, an
etcd member or etcd's leader, the gateway; SIGSTOP of the master; the master cut from etcd and the
nameservers, from its slave, from all; an etcd member cut off; a wall-clock step of an hour on one
process, through Debian's libfaketime; a stalled disk on the master), heals it and waits for sends
to resume; then every answered send is read back. Where network namespaces cannot be made (not
root, no iproute2) the test fails saying so (NetnsUnavailable), and without libfaketime it fails
naming the package `faketime`: it never skips. `NEMESIS_SEED=<n>` replays a run; the seed
is printed first. tests/bench/test_nemesis_checker.py shows the checker failing on a lost send.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from bench.nemesis.run import QUICK, NemesisConfig
from bench.scenarios.nemesis import QUICK_ROUNDS, nemesis_run

pytestmark = pytest.mark.e2e

SEED_ENV = "NEMESIS_SEED"
"""Not PETREL_: the suite clears every PETREL_ variable of the shell before a test (tests/conftest.py)."""


@pytest.mark.timeout(180)
async def test_every_answered_send_survives_two_rounds_of_faults(tmp_path: Path) -> None:
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1, 2**31))
    print(f"nemesis seed {seed}")
    config = NemesisConfig(seed, QUICK_ROUNDS, **QUICK)

    result = await nemesis_run(tmp_path / "data", config)
    print(result.report())

    assert result.ok, result.report()
    assert result.verdict.total("answered") > 0
    assert len(result.verdict.rounds) == QUICK_ROUNDS
