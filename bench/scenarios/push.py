"""Push subscriptions end to end, on real processes over loopback (issue 13).

Two measurements, each beside the gateway's consumers in the same cluster and run:

- push throughput: a backlog of numbered 1 KiB messages (the consumers scenario's
  sizes, 8 queues) is pushed by one subscription with max_in_flight 64 to a local
  receiver that acks at once (bench.pushload); counted from the end of the same
  warm-up share as the consumers' drain to the group's lag 0. Beside it, the
  consumers scenario's drain: 8 consumers receive+ack batches of 32 through the
  gateway, on a backlog of the same size; the ratio is push over receive+ack;
- send-to-push latency at 1,000 msg/s: one message per send, paced open loop, and
  the time until the receiver has its POST; p50 and p99 beside long polling's
  send-to-receive (the consumers scenario's run, 8 consumers) in the same cluster,
  and against targets of p50 <= 50 ms, p99 <= 200 ms (the bench's own: a push
  rides on the push service's long polls, so it should add tens of ms to them, not
  seconds). A message not pushed 3 s after the last send counts as infinitely late.

Why max_in_flight 64: the receiver answers at once, so what limits a subscription
is how many POSTs wait in the push service's and the receiver's event loops. On the
2-core machine (a 10,000-message backlog, 2026-11-24) 16 pushed 563 msg/s, 64 801
and 256 783: 64 is where more in flight stops helping (the same order as the
8 x 32 messages the consumers hold); more only queues in the loops.

The receiver verifies no signature and dedupes nothing: that is the receiver's
cost, not Petrel's, and the same for any push service.
How the 2 cores are shared: the receiver and the sender are one load process of
their own (as the consumers' load is), beside the gateway, the broker and the push
service; the timer, txcheck and the ETL's Celery processes run but are idle. Per
message, a push is one POST to the receiver, a share of the push service's receive
at the broker (as many as the window has room for) and one ack call to the broker;
a consumer's is its share of a receive and an ack of 32, each through the gateway.
FULL runs three rounds, alternating push and consumers, and reports medians.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass

from bench.cluster import Cluster, petrel_cluster, request_json
from bench.drain import Drain, run_drain
from bench.figures import BenchOptions, Figure
from bench.scenarios import consumers

MAX_IN_FLIGHT = 64
TARGET_P50_MS = 50.0
TARGET_P99_MS = 200.0
DRAIN_LIMIT_S = 300.0


@dataclass(frozen=True, slots=True)
class Sizes:
    backlog: int
    rate: float
    latency_warmup_s: float
    latency_seconds: float
    rounds: int

    @property
    def as_consumers(self) -> consumers.Sizes:
        """The same sizes, as the consumers scenario's helpers take them."""
        return consumers.Sizes(self.backlog, 0, self.rate, self.latency_warmup_s, self.latency_seconds)


FULL = Sizes(consumers.FULL.backlog, consumers.FULL.rate, consumers.FULL.latency_warmup_s, 10.0, 3)
QUICK = Sizes(consumers.QUICK.backlog, consumers.QUICK.rate, consumers.QUICK.latency_warmup_s, 3.0, 1)


@dataclass(slots=True)
class Round:
    push: Drain
    reference: Drain
    push_ms: tuple[float, float]
    poll_ms: tuple[float, float]


def push(options: BenchOptions) -> list[Figure]:
    return measure(QUICK if options.quick else FULL)


def measure(sizes: Sizes) -> list[Figure]:
    with petrel_cluster() as cluster:
        rounds = [_round(cluster, sizes, n) for n in range(sizes.rounds)]
    return _figures(rounds)


def _round(cluster: Cluster, sizes: Sizes, n: int) -> Round:
    pushed = push_drain(cluster, f"push-drain-{n}", sizes.backlog)
    reference = consumers.group_drain(
        cluster, f"push-reference-{n}", consumers.QUEUES, sizes.backlog, consumers.CONSUMERS, "before"
    )
    push_ms = push_latency(cluster, f"push-latency-{n}", sizes)
    poll_ms = consumers.long_poll_latency(cluster, sizes.as_consumers, f"push-poll-latency-{n}")
    return Round(pushed, reference, push_ms, poll_ms)


def _topic_and_group(cluster: Cluster, name: str) -> None:
    request_json("PUT", f"{cluster.url}/v1/topics/{name}", {"queues": consumers.QUEUES})
    request_json("PUT", f"{cluster.url}/v1/groups/{name}", {})


def push_drain(cluster: Cluster, name: str, count: int) -> Drain:
    """Topic and group `name`: `count` messages sent, then pushed to a receiver that acks at once."""
    _topic_and_group(cluster, name)
    command = [sys.executable, "-m", "bench.pushload", "drain", cluster.url, name, name, "--count", str(count)]
    command += ["--warmup-messages", str(count // 10), "--max-in-flight", str(MAX_IN_FLIGHT)]
    command += ["--limit", str(DRAIN_LIMIT_S)]
    drain = run_drain(command, DRAIN_LIMIT_S, f"{name} push")
    print(
        f"  {name}: {drain.count:,} messages, max_in_flight {MAX_IN_FLIGHT}: {drain.per_second:,.0f} msg/s "
        f"({drain.measured:,} in {drain.seconds:.2f} s to lag 0); {drain.receives:,} POSTs; "
        f"{drain.missing} missing, {drain.duplicates} twice, {drain.redelivered} redelivered",
        flush=True,
    )
    return drain


def push_latency(cluster: Cluster, name: str, sizes: Sizes) -> tuple[float, float]:
    """p50 and p99 send-to-push (ms) of `sizes.rate` paced sends to topic and group `name`."""
    _topic_and_group(cluster, name)
    command = [sys.executable, "-m", "bench.pushload", "latency", cluster.url, name, name]
    command += ["--rate", str(sizes.rate), "--warmup", str(sizes.latency_warmup_s)]
    command += ["--seconds", str(sizes.latency_seconds), "--max-in-flight", str(MAX_IN_FLIGHT)]
    return consumers.run_latency(command, sizes.latency_warmup_s + sizes.latency_seconds + 60, name, "pushed")


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _spread(values: list[float], unit: str) -> str:
    return f"{min(values):,.1f}-{max(values):,.1f} {unit}" if len(values) > 1 else f"{values[0]:,.1f} {unit}"


def _figures(rounds: list[Round]) -> list[Figure]:
    pushed = [r.push.per_second for r in rounds]
    polled = [r.reference.per_second for r in rounds]
    ratios = [r.push.per_second / r.reference.per_second for r in rounds if r.reference.per_second]
    push50, push99 = [r.push_ms[0] for r in rounds], [r.push_ms[1] for r in rounds]
    poll50, poll99 = [r.poll_ms[0] for r in rounds], [r.poll_ms[1] for r in rounds]
    if len(rounds) > 1:
        print(
            f"  push over {len(rounds)} rounds: {_spread(pushed, 'msg/s')} pushed, {_spread(polled, 'msg/s')} "
            f"receive+ack, ratio {min(ratios, default=0):.2f}-{max(ratios, default=0):.2f}x; "
            f"push p50 {_spread(push50, 'ms')}, p99 {_spread(push99, 'ms')}; "
            f"long poll p50 {_spread(poll50, 'ms')}, p99 {_spread(poll99, 'ms')}",
            flush=True,
        )
    missing = sum(r.push.missing for r in rounds)
    poll = f"long poll send-to-receive, {consumers.CONSUMERS} consumers"
    return [
        Figure(
            f"push, max_in_flight {MAX_IN_FLIGHT}, receiver acks at once",
            _median(pushed),
            f"receive+ack batches of 32, {consumers.CONSUMERS} consumers",
            _median(polled),
            "msg/s",
        ),
        Figure("push: missing", missing, "none", 0, "msgs", 1.0, higher_is_better=False),
        Figure("send-to-push p50, 1,000/s", _median(push50), poll + " p50", _median(poll50), "ms", None, False),
        Figure("send-to-push p99, 1,000/s", _median(push99), poll + " p99", _median(poll99), "ms", None, False),
        Figure("send-to-push p50, 1,000/s", _median(push50), "target", TARGET_P50_MS, "ms", 1.0, False),
        Figure("send-to-push p99, 1,000/s", _median(push99), "target", TARGET_P99_MS, "ms", 1.0, False),
    ]
