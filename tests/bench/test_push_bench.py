"""`petrel bench push` end to end at a tiny size: a real cluster, the push service, the receiver, the consumers."""

from __future__ import annotations

import math

import pytest

from bench.scenarios.push import Sizes, measure

pytestmark = pytest.mark.e2e

TINY = Sizes(backlog=500, rate=100.0, latency_warmup_s=0.5, latency_seconds=1.0, rounds=1)


@pytest.mark.timeout(180)  # 82 s with the CPU at a quarter (a cgroup quota of half a core of two): twice that
def test_the_push_bench_pushes_every_message_and_puts_each_figure_beside_its_reference() -> None:
    figures = {(f.name, f.reference_name): f for f in measure(TINY)}

    throughput = next(f for f in figures.values() if f.unit == "msg/s")
    assert throughput.ours > 0
    assert throughput.reference > 0
    assert throughput.reference_name == "receive+ack batches of 32, 8 consumers"
    assert throughput.ratio is not None
    assert figures["push: missing", "none"].ours == 0
    latencies = [f for f in figures.values() if f.name.startswith("send-to-push")]
    assert {f.reference_name for f in latencies} == {
        "long poll send-to-receive, 8 consumers p50",
        "long poll send-to-receive, 8 consumers p99",
        "target",
    }
    assert all(math.isfinite(f.ours) for f in latencies)  # every measured send was pushed
