"""What a message costs each process, in CPU: the figures docs/performance.md sizes a deployment from.

On one cluster, for single sends, batches of 32 and receive+ack in batches of 32 (the
loads of the gateway and consumers scenarios: wrk for the sends, the 8 consumers of
bench.consumeload for receive+ack), every Petrel process's CPU time (user + system,
from /proc) is read before and after the load, and divided by the messages the load
moved: answered sends (the load counts from its start), or messages received and
acked (the drain's count; its backlog is sent before). The load generator's own CPU
(bench.cpu.children_cpu: the load process and what it started) is given beside them,
a message's and a request's, to show it is not what limits the figures.

Absolute CPU swings with the machine (by up to 4x between days), so the same run
measures the unit: the CPU a request costs the FastAPI no-op server (bench.noop_server,
driven by the same load generator; the mean of a run before the cluster starts and one
after it stops, as the machine's speed drifts within minutes). Each load's gateway +
broker CPU a message is also given in those no-op units, judged against issue 29's
"at least" (lower is better).

With `--colocated`, the same loads run again on a colocated cluster (`petrel up --colocated`: the gateway and
broker-a in one process, whose CPU is the path's), given beside the separate services' as "colocated".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from bench.cluster import Cluster, petrel_cluster, request_json
from bench.consumeload import FILL_SENDERS, Client, fill
from bench.cpu import children_cpu, process_cpu_seconds
from bench.figures import BenchOptions, Figure
from bench.loopback import served_module_process
from bench.scenarios import consumers
from bench.scenarios.gateway import TOPIC, Timing, send_tally

QUEUES = 8
DRAIN_TOPIC = "sizing-drain"
PROCESSES = ("gateway", "broker")
"""The roles on a message's path: every gateway worker (gateway, gateway-2, ...) and every broker process
(broker-a, its slaves broker-a@1, broker-b, ...); the others (nameserver, timer, txcheck, push) together."""
LOAD_GENERATOR = "load generator"
SINGLE, BATCH, RECEIVE_ACK = "single sends", "batches of 32", "receive+ack 32, 8 consumers"
AT_MOST_UNITS = {SINGLE: 2.3, BATCH: 0.55, RECEIVE_ACK: 1.0}
"""Issue 29's "at least": gateway + broker CPU a message, in no-op units (lower is better)."""


@dataclass(frozen=True, slots=True)
class Load:
    """What one load cost: CPU µs a message of each process (and the load generator), and messages a request."""

    costs: dict[str, float]
    messages_per_request: int

    @property
    def path(self) -> float:
        """Gateway + broker CPU µs a message."""
        return sum(self.costs.get(role, 0.0) for role in PROCESSES)


def cpu_seconds(cluster: Cluster) -> dict[str, float]:
    """Each running process's CPU seconds so far (user + system), by its name in run/cluster.json."""
    found: dict[str, float] = {}
    for process in cluster.processes():
        seconds = process_cpu_seconds(int(process["pid"]))
        if seconds is not None:
            found[process["name"]] = seconds
    return found


def per_message(cluster: Cluster, load: Callable[[], int]) -> dict[str, float]:
    """CPU µs a message of each role on the path (PROCESSES), 'others' and the load generator (the child
    processes the load ran), over a load that answers how many messages it moved."""
    before = cpu_seconds(cluster)
    with children_cpu() as client:
        moved = max(load(), 1)
    after = cpu_seconds(cluster)
    by_role = dict.fromkeys((*PROCESSES, "others"), 0.0)
    for name in after:
        by_role[role_of(name)] += after[name] - before.get(name, 0.0)
    costs = {role: seconds * 1e6 / moved for role, seconds in by_role.items()}
    costs[LOAD_GENERATOR] = client.seconds * 1e6 / moved
    return costs


def role_of(process: str) -> str:
    """`gateway` or `broker` for a process on a message's path (by its name in run/cluster.json), else `others`;
    a colocated process (gateway+broker-a) counts as the gateway, its broker's share not told apart."""
    if process == "gateway" or process.startswith(("gateway-", "gateway+")):
        return "gateway"
    return "broker" if process.startswith("broker-") else "others"


def noop_cost(timing: Timing, what: str) -> tuple[float, float]:
    """CPU µs a request of the FastAPI no-op server (the unit), and of its load generator."""
    with served_module_process("bench.noop_server") as server:
        before = process_cpu_seconds(server.pid) or 0.0
        with children_cpu() as client:
            tally = send_tally(f"http://127.0.0.1:{server.port}/v1/topics/{TOPIC}/messages", "single", timing, what)
        after = process_cpu_seconds(server.pid) or 0.0
    requests = max(tally.requests, 1)
    return (after - before) * 1e6 / requests, client.seconds * 1e6 / requests


def sizing(options: BenchOptions) -> list[Figure]:
    timing = Timing(0.0, 2.0) if options.quick else Timing(0.0, 8.0)  # no warm-up: every answered send is counted
    drain_count = 20_000 if options.quick else 100_000
    before_us, noop_client_us = noop_cost(timing, "FastAPI no-op, before")
    loads = _loads(timing, drain_count, colocated=False)
    colocated = _loads(timing, drain_count, colocated=True) if options.colocated else {}
    after_us, _ = noop_cost(timing, "FastAPI no-op, after")
    noop_us = (before_us + after_us) / 2  # the machine drifts: the unit is the mean of one run before, one after
    print(f"  FastAPI no-op: {before_us:.0f} µs a request before the cluster's loads, {after_us:.0f} µs after")
    _say(loads, noop_us, noop_client_us)
    _say(colocated, noop_us, noop_client_us, "colocated, ")
    return [
        *cost_figures(loads),
        *unit_figures(loads, noop_us),
        *cost_figures(colocated, "colocated, "),
        *unit_figures(colocated, noop_us, "colocated, ")[1:],
    ]


def _loads(timing: Timing, drain_count: int, *, colocated: bool) -> dict[str, Load]:
    """Each load's CPU a message on one cluster (`colocated`: petrel up --colocated)."""
    loads: dict[str, Load] = {}
    with petrel_cluster(colocated=colocated) as cluster:
        for name, kind, path in ((SINGLE, "single", "messages"), (BATCH, "batch", "messages:batch")):
            topic = f"sizing-{kind}"
            request_json("PUT", f"{cluster.url}/v1/topics/{topic}", {"queues": QUEUES})

            def send_load(kind: str = kind, path: str = path, topic: str = topic) -> int:
                tally = send_tally(f"{cluster.url}/v1/topics/{topic}/{path}", kind, timing, f"sizing: {kind} sends")
                return tally.requests * tally.messages_per_request

            loads[name] = Load(per_message(cluster, send_load), 1 if kind == "single" else 32)
        backlog(cluster, DRAIN_TOPIC, drain_count)
        drained = per_message(
            cluster,
            lambda: (
                consumers.group_drain(cluster, DRAIN_TOPIC, QUEUES, drain_count, consumers.CONSUMERS, "no").delivered
            ),
        )
        loads[RECEIVE_ACK] = Load(drained, 16)  # a receive of 32 and its ack: two requests for 32 messages
    return loads


def cost_figures(loads: dict[str, Load], label: str = "") -> list[Figure]:
    return [
        Figure(f"CPU a message, {label}{process}: {name}", cost, "-", 0.0, "us")
        for name, load in loads.items()
        for process, cost in load.costs.items()
    ]


def unit_figures(loads: dict[str, Load], noop_us: float, label: str = "") -> list[Figure]:
    """The no-op's CPU a request, and each load's gateway + broker CPU a message in its units."""
    found = [Figure("CPU a request, FastAPI no-op (the no-op unit)", noop_us, "-", 0.0, "us")]
    for name, load in loads.items():
        units = load.path / noop_us if noop_us else 0.0
        found.append(
            Figure(
                f"CPU a message, {label}gateway + broker: {name}",
                units,
                "issue 29's at least",
                AT_MOST_UNITS[name],
                "no-op",
                1.0,
                higher_is_better=False,
            )
        )
    return found


def _say(loads: dict[str, Load], noop_us: float, noop_client_us: float, label: str = "") -> None:
    if not label:
        print(
            f"  FastAPI no-op: {noop_us:.0f} µs a request (the no-op unit); its load generator {noop_client_us:.0f} µs"
        )
    for name, load in loads.items():
        units = f"{load.path / noop_us:.1f}" if noop_us else "-"
        client = load.costs[LOAD_GENERATOR]
        print(
            f"  {label}{name}: {units} no-op units (gateway {load.costs['gateway']:.0f} + broker "
            f"{load.costs['broker']:.0f} µs a message); load generator {client:.1f} µs a message, "
            f"{client * load.messages_per_request:.0f} µs a request",
            flush=True,
        )


def backlog(cluster: Cluster, topic: str, count: int) -> None:
    """The topic and its group, and `count` messages sent to it before the drain is measured."""
    request_json("PUT", f"{cluster.url}/v1/topics/{topic}", {"queues": QUEUES})
    request_json("PUT", f"{cluster.url}/v1/groups/{topic}", {})

    async def send() -> None:
        async with Client(FILL_SENDERS) as client:
            await fill(client, cluster.url, topic, count)

    asyncio.run(send())
