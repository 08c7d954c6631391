"""What the gateway and broker keep as messages go through: memory after each of several equal rounds.

On one cluster, the same round again and again: a backlog of 1 KiB messages sent in batches
(bench.consumeload's fill), then drained by 8 consumers that receive up to 32 and ack them (the
consumers scenario's drain). After each round every process's anonymous memory (RssAnon in
/proc: the heap, not the mapped CommitLog, which is the page cache's) is read and added up by
role, as sizing adds up CPU. A process's memory first grows to its bounded memories (the 200,000
ended leases a broker remembers to tell a late ack why, its caches), then stays: the figure is
what the last round added, in MB per 100,000 messages, which is about 0 when nothing leaks. The
compiled modules leaked 25 MB a round in the broker and 14 in the gateway (mypyc/mypyc#1192,
deploy/compiled.py), which is what this would have shown.
"""

from __future__ import annotations

from pathlib import Path

from bench.cluster import Cluster, petrel_cluster
from bench.figures import BenchOptions, Figure
from bench.scenarios import consumers
from bench.scenarios.sizing import PROCESSES, QUEUES, backlog, role_of

TOPIC = "memory-rounds"
PER = 100_000
"""Growth is given per this many messages."""


def memory(options: BenchOptions) -> list[Figure]:
    count, rounds = (20_000, 3) if options.quick else (100_000, 4)
    after: list[dict[str, float]] = []
    with petrel_cluster() as cluster:
        before = anonymous_mb(cluster)
        print(f"  memory at start: {_said(before)}", flush=True)
        for n in range(1, rounds + 1):
            backlog(cluster, TOPIC, count)
            consumers.group_drain(cluster, TOPIC, QUEUES, count, consumers.CONSUMERS, "no")
            after.append(anonymous_mb(cluster))
            print(f"  memory after round {n} ({n * count:,} messages): {_said(after[-1])}", flush=True)
    return memory_figures(before, after, count)


def memory_figures(before: dict[str, float], after: list[dict[str, float]], count: int) -> list[Figure]:
    """Each role's memory after the first and last rounds, and what the last round added per PER messages."""
    last, previous = after[-1], after[-2] if len(after) > 1 else before
    found: list[Figure] = []
    for role in PROCESSES:
        found.append(Figure(f"anonymous memory, {role}, after round 1", after[0].get(role, 0.0), "-", 0.0, "MB"))
        found.append(Figure(f"anonymous memory, {role}, after round {len(after)}", last.get(role, 0.0), "-", 0.0, "MB"))
        added = (last.get(role, 0.0) - previous.get(role, 0.0)) * PER / count
        found.append(Figure(f"memory the last round added, {role}", added, "-", 0.0, f"MB per {PER:,} msgs"))
    return found


def anonymous_mb(cluster: Cluster) -> dict[str, float]:
    """Each role's anonymous memory now (MB), by the processes named in run/cluster.json (sizing's roles)."""
    found: dict[str, float] = {}
    for process in cluster.processes():
        kib = anonymous_kib(int(process["pid"]))
        if kib is not None:
            role = role_of(process["name"])
            found[role] = found.get(role, 0.0) + kib / 1024
    return found


def anonymous_kib(pid: int) -> int | None:
    """RssAnon of the process (KiB); None when it is gone or not ours to read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _said(memory: dict[str, float]) -> str:
    return ", ".join(f"{role} {mb:,.0f} MB" for role, mb in sorted(memory.items()))
