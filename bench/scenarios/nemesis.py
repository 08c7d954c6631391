"""`petrel bench nemesis --rounds N --seed S`: the nemesis run (issue 27) on a replicated cluster of real processes.

broker-a is a SYNC_MASTER with one slave, two nameservers both run the controller, etcd has
three members; a set workload goes through the gateway while each round applies one nemesis or
two mixed (bench.nemesis.plan), heals them and waits for sends to resume. Then every answered
send is read back (bench.nemesis.checker). The seed is printed first; the same seed replays the
same rounds. `--quick`: two short rounds. Anything lost, an unexplained duplicate, an epoch with
two masters or a fault that did not heal prints the report, keeps the cluster's data and logs in
`data/bench/nemesis-<seed>`, and exits 1. The cluster runs on test hosts made of network
namespaces (tests.support.netns_cluster: a host per etcd member, nameserver, broker and one for
the gateway), so that the partition nemeses can cut one host from another: it needs root
(CAP_NET_ADMIN) and iproute2, and says so when it cannot make them. Its brokers and nameservers
run on steppable wall clocks (bench.nemesis.clock), its brokers SYNC_FLUSH through the stalling
wrapper (bench.nemesis.disk). The scenario runs from a checkout (as `make bench` does).
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
from pathlib import Path

from bench.figures import BenchOptions, Figure
from bench.kept import keep_failed_run
from bench.nemesis import clock, disk
from bench.nemesis.faults import BROKERS
from bench.nemesis.plan import Nemesis
from bench.nemesis.run import FULL, QUICK, NemesisConfig, NemesisResult, run_nemesis

REPOSITORY = Path(__file__).resolve().parents[2]
ROUNDS, QUICK_ROUNDS = 20, 2


def nemesis(options: BenchOptions) -> list[Figure]:
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(1, 2**31)
    count = options.rounds or (QUICK_ROUNDS if options.quick else ROUNDS)
    only = tuple(_nemesis(name) for name in options.nemeses)
    config = NemesisConfig(seed, count, **(QUICK if options.quick else FULL), only=only)
    print(f"  nemesis: seed {seed}, {count} rounds", flush=True)
    with tempfile.TemporaryDirectory(prefix="petrel-bench-nemesis-") as tmp:
        try:
            result = asyncio.run(nemesis_run(Path(tmp) / "data", config))
        except Exception:
            print(f"nemesis FAILED (seed {seed}); the cluster's data and logs are in {_keep(tmp, seed)}", flush=True)
            raise
        print(result.report(), flush=True)
        if not result.ok:
            raise SystemExit(f"nemesis FAILED (seed {seed}); the cluster's data and logs are in {_keep(tmp, seed)}")
    return figures(result)


def _keep(tmp: str, seed: int) -> Path:
    return keep_failed_run(Path(tmp) / "data", f"nemesis-{seed}")


async def nemesis_run(data_dir: Path, config: NemesisConfig) -> NemesisResult:
    """The run on a fresh replicated cluster under `data_dir` on netns hosts (stopped after): its brokers and
    nameservers on steppable wall clocks (bench.nemesis.clock), its brokers SYNC_FLUSH and started through the
    stalling wrapper (bench.nemesis.disk)."""
    if str(REPOSITORY) not in sys.path:
        sys.path.insert(0, str(REPOSITORY))
    from tests.support.netns_cluster import NetnsCluster, netns_replicated_cluster

    def steppable_and_stallable(cluster: NetnsCluster) -> None:
        services = cluster.services
        clock.steppable(data_dir, [(name, services[name].env) for name in (*BROKERS, *cluster.nameserver_names)])
        module = disk.stallable(data_dir, [(name, services[name].env) for name in BROKERS])
        for name in BROKERS:
            services[name].argv = [sys.executable, "-m", module]

    async with netns_replicated_cluster(data_dir, prepare=steppable_and_stallable) as (cluster, client):
        return await run_nemesis(cluster, cluster.etcd, client, config)


def _nemesis(name: str) -> Nemesis:
    try:
        return Nemesis[name.upper()]
    except KeyError:
        known = ", ".join(n.name.lower() for n in Nemesis)
        raise SystemExit(f"no nemesis {name!r}: one of {known}") from None


def figures(result: NemesisResult) -> list[Figure]:
    verdict = result.verdict
    answered = verdict.total("answered")
    found = [
        Figure("nemesis: rounds", len(verdict.rounds), "planned", result.config.rounds, "round"),
        Figure("nemesis: sends answered", answered, "-", 0, "msg"),
        Figure("nemesis: lost (must be 0)", verdict.total("lost"), "-", 0, "msg"),
        Figure("nemesis: duplicates explained", verdict.total("explained"), "answered", answered, "msg"),
        Figure("nemesis: duplicates unexplained (must be 0)", verdict.total("unexplained"), "-", 0, "msg"),
    ]
    for nemesis in Nemesis:
        gaps = [
            r.longest_gap_s
            for r, log in zip(verdict.rounds, result.logs, strict=False)
            if [s.nemesis for s in log.round.steps] == [nemesis]
        ]
        if gaps:
            found.append(
                Figure(f"nemesis: longest without an answer, {nemesis}", max(gaps), "-", 0, "s", higher_is_better=False)
            )
    return found
