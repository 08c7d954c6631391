"""`petrel bench chaos`: the chaos run of tests/e2e/test_chaos.py, longer (issue 10).

A mixed load under SYNC_FLUSH on real processes (nameserver, broker, timer,
gateway, txcheck's Celery worker and beat on the Redis at 127.0.0.1:6379), with
kill -9 of the broker, the timer, txcheck's worker and the gateway at seeded
random moments. Figures: operations, kills per process, messages sent and
answered, delivered and dead-lettered per group, rolled back, duplicates
(explained and not), and lost, which must be 0. The run fails loudly, with its
seed, when anything is lost, an unexplained duplicate is seen, a process does not
come back, or `petrel store check` finds a problem.

`BENCH_CHAOS_SECONDS` sets the load's duration (default 300; 60 with --quick),
`BENCH_CHAOS_KILLS` the number of kills (default one per 8 s), and
`PETREL_CHAOS_SEED` the seed. The cluster is the e2e tests' LocalCluster, so the
scenario runs from a checkout (as `make bench` does).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from bench.chaos.load import GROUP_A, GROUP_B
from bench.chaos.run import (
    CLUSTER_ENV,
    ChaosConfig,
    ChaosResult,
    checkback_receiver,
    run_chaos,
    seed_from_env,
    store_checks,
)
from bench.figures import BenchOptions, Figure
from bench.kept import keep_failed_run
from libs import webhooks

SECONDS_ENV, KILLS_ENV = "BENCH_CHAOS_SECONDS", "BENCH_CHAOS_KILLS"
REPOSITORY = Path(__file__).resolve().parents[2]


def chaos(options: BenchOptions) -> list[Figure]:
    duration = float(os.environ.get(SECONDS_ENV) or (60 if options.quick else 300))
    kills = int(os.environ.get(KILLS_ENV) or max(4, int(duration // 8)))
    config = ChaosConfig(seed=seed_from_env(), duration_s=duration, kills=kills, quiesce_s=90.0)
    print(f"  chaos: seed {config.seed}, {duration:.0f} s of load, {kills} kills", flush=True)
    with tempfile.TemporaryDirectory(prefix="petrel-bench-chaos-") as tmp:
        result = asyncio.run(_run(Path(tmp) / "data", config))
        print(result.report(), flush=True)
        if not result.ok:
            kept = keep_failed_run(Path(tmp) / "data", f"chaos-{config.seed}")
            print(f"  chaos FAILED (seed {config.seed}); the cluster's data and logs are in {kept}", flush=True)
    return _figures(result)


async def _run(data_dir: Path, config: ChaosConfig) -> ChaosResult:
    if str(REPOSITORY) not in sys.path:
        sys.path.insert(0, str(REPOSITORY))
    from tests.support.cluster import local_cluster_with_txcheck

    secret = webhooks.new_secret()
    with checkback_receiver(secret) as checkback_url:
        async with local_cluster_with_txcheck(data_dir, replicated=True, **CLUSTER_ENV) as (cluster, client):
            result = await run_chaos(cluster, client, config, checkback_url, secret)
    result.store_check = await asyncio.to_thread(store_checks, data_dir)
    return result


def _figures(result: ChaosResult) -> list[Figure]:
    f = result.verdict.figures
    lost = f[f"{GROUP_A}: lost"] + f[f"{GROUP_B}: lost"]
    kills = len(result.ledger.kills)
    store_problems = 0 if result.store_check is None or result.store_check[0] == 0 else 1
    return [
        Figure("chaos: operations (HTTP requests)", f["operations"], "-", 0, "req"),
        Figure("chaos: kills (-9)", kills, "planned", result.config.kills, "kill"),
        Figure("chaos: messages answered", f["sends answered"], "sent", f["sends tried"], "msg"),
        Figure(f"chaos: {GROUP_A} delivered", f[f"{GROUP_A}: delivered"], "answered", f["sends answered"], "msg"),
        Figure(f"chaos: {GROUP_B} delivered", f[f"{GROUP_B}: delivered"], "answered", f["sends answered"], "msg"),
        Figure(f"chaos: {GROUP_B} in DLQ", f[f"{GROUP_B}: in DLQ"], "answered", f["sends answered"], "msg"),
        Figure("chaos: rolled back", f["rolled back"], "answered", f["sends answered"], "msg"),
        Figure("chaos: duplicates explained", f["duplicates explained"], "answered", f["sends answered"], "msg"),
        Figure("chaos: duplicates unexplained (must be 0)", f["duplicates unexplained"], "-", 0, "msg"),
        Figure("chaos: lost (must be 0)", lost, "-", 0, "msg"),
        Figure("chaos: store check problems (must be 0)", store_problems, "-", 0, "run"),
    ]
