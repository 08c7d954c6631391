"""The chaos test (issues 10, 16): a mixed load under SYNC_FLUSH while broker, timer, txcheck worker and gateway die.

The broker is replicated (SYNC_MASTER with one slave, under the nameserver's controller):
killing "the broker" kills whichever is the master now, and its slave takes over before the
killed one starts again (as the new master's slave).

Real processes on the real Redis: single, batch, delayed and transactional sends
(committed, rolled back, left to the check-back), two consumer groups acking and
nacking (one sends its poison to the DLQ), and kill -9 at seeded random moments.
Afterwards every answered send is accounted for in each group, each duplicate is
explained by a kill or an expired lease, and `petrel store check` is clean.
`PETREL_CHAOS_SEED=<n>` repeats a run; the seed is printed on failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos.run import CLUSTER_ENV, ChaosConfig, checkback_receiver, run_chaos, seed_from_env, store_checks
from libs import webhooks
from tests.support.cluster import local_cluster_with_txcheck

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(240)  # 116 s with the CPU at a quarter (a cgroup quota of half a core of two): twice that
async def test_every_answered_send_is_accounted_for_under_kill_9_of_every_process(tmp_path: Path) -> None:
    # Every process dies at least once in 20 s of load (`petrel bench chaos` runs longer ones).
    config = ChaosConfig(seed=seed_from_env(), duration_s=20.0, kills=6, quiesce_s=40.0)
    secret = webhooks.new_secret()
    data_dir = tmp_path / "data"
    print(f"chaos seed {config.seed}")
    with checkback_receiver(secret) as checkback_url:
        async with local_cluster_with_txcheck(data_dir, replicated=True, **CLUSTER_ENV) as (cluster, client):
            result = await run_chaos(cluster, client, config, checkback_url, secret)
    result.store_check = store_checks(data_dir)
    print(result.report())

    assert result.ok, result.report()
    assert result.verdict.figures["sends answered"] > 0
    assert len(result.ledger.kills) == config.kills
