"""`python -m bench [scenario ...] [--quick] [--runs N] [--profile] [--colocated]`: the same as `petrel bench`."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.figures import BenchOptions
from bench.harness import run
from bench.scenarios import SCENARIOS


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="petrel bench", description="Run benchmark scenarios.")
    parser.add_argument("scenarios", nargs="*", help=f"scenario names (default: all): {', '.join(sorted(SCENARIOS))}")
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run, figures only indicative")
    parser.add_argument("--results", type=Path, default=Path("data/bench"), help="where the JSON and chart go")
    parser.add_argument(
        "--runs", type=_positive, default=1, help="run the scenarios N times; report each figure's median"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="record a py-spy flame graph of every Petrel process during each load (under RESULTS/profiles/)",
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="also measure RabbitMQ's HTTP publish API beside single sends (enables the local RabbitMQ's management "
        "plugin when it is off)",
    )
    parser.add_argument("--rounds", type=_positive, help="rounds of the nemesis run (default 20; 2 with --quick)")
    parser.add_argument("--seed", type=int, help="the nemesis run's seed: the same seed replays the same rounds")
    parser.add_argument(
        "--nemesis",
        action="append",
        default=[],
        metavar="NAME",
        help="the nemesis run draws only from these faults (repeat it; e.g. kill_etcd_leader; default: all)",
    )
    parser.add_argument(
        "--colocated",
        action="store_true",
        help="gateway and sizing: also measure a colocated cluster (petrel up --colocated: the gateway and broker in "
        "one process) and give its figures beside the separate services'",
    )
    args = parser.parse_args(argv)
    options = BenchOptions(
        quick=args.quick,
        rounds=args.rounds,
        seed=args.seed,
        nemeses=tuple(args.nemesis),
        peers=args.peers,
        colocated=args.colocated,
    )
    run(SCENARIOS, args.scenarios, options, args.results, runs=args.runs, profile=args.profile)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, not {value}")
    return value


if __name__ == "__main__":
    main()
