"""What a message costs each process, in CPU: the figures docs/performance.md sizes a deployment from.

On one cluster, for single sends, batches of 32 and receive+ack in batches of 32 (the
load processes of the gateway and consumers scenarios), every Petrel process's CPU
time (user + system, from /proc) is read before and after the load, and divided by
the messages the load moved: answered sends (the load counts from its start), or
messages received and acked (the drain's count; its backlog is sent before). The load generator's own CPU is not a
Petrel process's and is left out. Each figure is informational: it has no reference.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from bench.cluster import Cluster, petrel_cluster, request_json
from bench.consumeload import fill
from bench.figures import BenchOptions, Figure
from bench.scenarios import consumers
from bench.scenarios.gateway import Timing, load_tally

QUEUES = 8
DRAIN_TOPIC = "sizing-drain"
PROCESSES = ("gateway", "broker-a")
"""The processes on a message's path; the others (nameserver, timer, txcheck, push) are reported together."""
COLOCATED = ("gateway+broker-a",)
"""The process on a message's path in a colocated cluster (`--colocated`: measured too, beside the separate one)."""


def cpu_seconds(cluster: Cluster) -> dict[str, float]:
    """Each running process's CPU seconds so far (user + system), by its name in run/cluster.json."""
    listing = json.loads((cluster.data_dir / "run" / "cluster.json").read_text())
    ticks = os.sysconf("SC_CLK_TCK")
    found: dict[str, float] = {}
    for process in listing["processes"]:
        try:
            fields = Path(f"/proc/{process['pid']}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone, or not ours to read
        found[process["name"]] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return found


def per_message(cluster: Cluster, load: Callable[[], int], processes: tuple[str, ...] = PROCESSES) -> dict[str, float]:
    """CPU µs a message of each of `processes` (those on the path) and of the others together ('others'), over a
    load that answers how many it moved."""
    before = cpu_seconds(cluster)
    moved = load()
    after = cpu_seconds(cluster)
    spent = {name: after[name] - before.get(name, 0.0) for name in after}
    costs = {name: spent.pop(name, 0.0) * 1e6 / max(moved, 1) for name in processes}
    costs["others"] = sum(spent.values()) * 1e6 / max(moved, 1)
    return costs


def sizing(options: BenchOptions) -> list[Figure]:
    timing = Timing(0.0, 2.0) if options.quick else Timing(0.0, 8.0)  # no warm-up: every answered send is counted
    drain_count = 20_000 if options.quick else 100_000
    results = _costs(timing, drain_count, PROCESSES)
    figures = [
        Figure(f"CPU a message, {process}: {load}", cost, "-", 0.0, "us")
        for load, costs in results.items()
        for process, cost in costs.items()
    ]
    if options.colocated:
        colocated = _costs(timing, drain_count, COLOCATED)
        figures += [
            Figure(f"CPU a message, colocated, {process}: {load}", cost, "-", 0.0, "us")
            for load, costs in colocated.items()
            for process, cost in costs.items()
        ]
    return figures


def _costs(timing: Timing, drain_count: int, processes: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Each load's CPU a message of each of `processes` (COLOCATED: on a colocated cluster) and the others."""
    results: dict[str, dict[str, float]] = {}
    with petrel_cluster(colocated=processes == COLOCATED) as cluster:
        for kind, path in (("single", "messages"), ("batch", "messages:batch")):
            topic = f"sizing-{kind}"
            request_json("PUT", f"{cluster.url}/v1/topics/{topic}", {"queues": QUEUES})

            def send_load(kind: str = kind, path: str = path, topic: str = topic) -> int:
                url = f"{cluster.url}/v1/topics/{topic}/{path}"
                tally = load_tally([sys.executable, "-m", "bench.loadgen", url, kind], timing, f"sizing: {kind} sends")
                return tally.requests * tally.messages_per_request

            results["single sends" if kind == "single" else "batches of 32"] = per_message(
                cluster, send_load, processes
            )
        _backlog(cluster, DRAIN_TOPIC, drain_count)
        results["receive+ack 32, 8 consumers"] = per_message(
            cluster,
            lambda: (
                consumers.group_drain(cluster, DRAIN_TOPIC, QUEUES, drain_count, consumers.CONSUMERS, "no").delivered
            ),
            processes,
        )
    return results


def _backlog(cluster: Cluster, topic: str, count: int) -> None:
    """The topic and its group, and `count` messages sent to it before the drain is measured."""
    import aiohttp

    request_json("PUT", f"{cluster.url}/v1/topics/{topic}", {"queues": QUEUES})
    request_json("PUT", f"{cluster.url}/v1/groups/{topic}", {})

    async def send() -> None:
        async with aiohttp.ClientSession() as session:
            await fill(session, cluster.url, topic, count)

    asyncio.run(send())
