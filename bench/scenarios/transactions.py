"""Transactional messages end to end, on real processes (issue 6: transactions with check-backs by Celery).

Clusters started by the launcher (one broker; txcheck's health process, Celery
worker and beat; Redis on 127.0.0.1:6379), and a check-back receiver in a
process of its own (bench.txload: verifies each signature, answers COMMIT,
notes when the first check of each message arrived). Two figures, each beside
its reference or target:

- half + commit through the gateway (bench.loadgen `transaction`: a half
  message, then its commit, over 32 keep-alive connections; one message per
  pair) against two plain single sends of the same 1 KiB body in the same
  cluster (half the single sends' rate); target 1.0x (issue 15);
- N half messages (10,000) sent as fast as 32 connections go and never ended by
  their producer: all must be resolved by check-back (the committed copies in
  the topic are counted), and the first check of each must come within
  `transaction_timeout` + 2 scan intervals of its send: the slowest is the figure.
  txcheck runs with its defaults: transaction timeout 6 s, a scan every 30 s.

`BENCH_TX_ONLY=throughput` runs the first figure alone (the second takes over a minute).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from bench.cluster import Cluster, petrel_cluster, request_json
from bench.figures import BenchOptions, Figure
from bench.loopback import served
from bench.scenarios.gateway import Timing, sends
from bench.scheduled import percentile, topic_size, warnings_in
from bench.txload import GROUP, SECRET_ENV, receiver_stats, send_halves
from libs import webhooks
from services.txcheck.settings import TxcheckSettings

QUEUES = 8
TRANSACTION_TIMEOUT_S = TxcheckSettings.model_fields["transaction_timeout_ms"].default / 1000
SCAN_INTERVAL_S = TxcheckSettings.model_fields["scan_interval_seconds"].default
ONLY_ENV = "BENCH_TX_ONLY"


@dataclass(frozen=True, slots=True)
class Sizes:
    throughput: Timing
    forgotten: int
    wait_s: float
    """How long to wait for every check after the last half was sent."""


FULL = Sizes(Timing(2.0, 8.0), 10_000, 180.0)
QUICK = Sizes(Timing(0.5, 1.5), 2_000, 60.0)


def transactions(options: BenchOptions) -> list[Figure]:
    import uvloop

    sizes = QUICK if options.quick else FULL
    os.sync()
    figures: list[Figure] = []
    with checkback_receiver() as receiver:
        with petrel_cluster() as cluster:
            topic = register(cluster, receiver, "tx-throughput")
            plain = sends(f"{topic}/messages", "single", sizes.throughput, "single sends")
            figures.append(half_commit_figure(half_commits(topic, sizes.throughput), plain))
        if os.environ.get(ONLY_ENV) == "throughput":
            return figures
        with petrel_cluster() as cluster:
            register(cluster, receiver, "tx-forgotten")
            figures += uvloop.run(_forgotten(cluster, receiver.port, sizes))
    return figures


@dataclass(frozen=True, slots=True)
class Receiver:
    port: int
    secret: str


@contextlib.contextmanager
def checkback_receiver() -> Iterator[Receiver]:
    """bench.txload's check-back receiver in a process of its own, with a new signing secret."""
    secret = webhooks.new_secret()
    os.environ[SECRET_ENV] = secret  # for the receiver's process
    with served("bench.txload:receiver_app") as port:
        yield Receiver(port, secret)


def register(cluster: Cluster, receiver: Receiver, topic: str) -> str:
    """The bench producer group (checked back at `receiver`) and `topic`; the topic's URL."""
    group = {"checkback_url": f"http://127.0.0.1:{receiver.port}/checkback", "signing_secret": receiver.secret}
    request_json("PUT", f"{cluster.url}/v1/producer-groups/{GROUP}", group)
    request_json("PUT", f"{cluster.url}/v1/topics/{topic}", {"queues": QUEUES})
    return f"{cluster.url}/v1/topics/{topic}"


def half_commits(topic_url: str, timing: Timing) -> float:
    """Half + commit pairs a second (one message each) over 32 connections."""
    return sends(f"{topic_url}/transactions", "transaction", timing, "half + commit")


def half_commit_figure(pairs: float, single_sends: float) -> Figure:
    """A pair is two requests where a send is one: the reference is two single sends, half their rate."""
    return Figure(
        "half + commit through the gateway, 32 conns", pairs, "two single sends", single_sends / 2, "msg/s", 1.0
    )


async def _forgotten(cluster: Cluster, port: int, sizes: Sizes) -> list[Figure]:
    count, topic = sizes.forgotten, "tx-forgotten"
    halves = await send_halves(cluster.url, topic, count)
    sent_at = time.monotonic()
    print(
        f"  forgotten: {len(halves.stored_at):,} halves sent in {halves.seconds:.1f} s "
        f"({len(halves.stored_at) / halves.seconds:,.0f}/s), {halves.errors} failed"
        + (f"; first: {halves.first_error}" if halves.first_error else ""),
        flush=True,
    )
    first: dict[str, int] = {}
    committed = 0
    while time.monotonic() - sent_at < sizes.wait_s:
        first = cast(dict[str, int], (await receiver_stats(port))["first_check_ms"])
        committed = await topic_size(cluster.url, topic, QUEUES)
        if committed >= len(halves.stored_at) and all(m in first for m in halves.stored_at):
            break
        await asyncio.sleep(0.5)
    else:
        print(f"  WARNING forgotten: not all resolved {sizes.wait_s:.0f} s after the last send; txcheck's log:")
        print(warnings_in(cluster.data_dir / "logs" / "txcheck-worker.log"), flush=True)
    after = [first[m] - stored for m, stored in halves.stored_at.items() if m in first]
    missing = len(halves.stored_at) - len(after)
    bound_s = TRANSACTION_TIMEOUT_S + 2 * SCAN_INTERVAL_S
    slowest_s = sizes.wait_s if missing else max(after, default=0) / 1000
    checks = (await receiver_stats(port))["checks"]
    print(
        f"  forgotten: {committed:,} of {count:,} committed by check-back ({checks} checks asked); "
        f"first check after the send p50 {percentile(after, 0.5) / 1000:.1f} s, "
        f"p99 {percentile(after, 0.99) / 1000:.1f} s, max {slowest_s:.1f} s; {missing} never checked",
        flush=True,
    )
    label = f"{count // 1000}k" if count >= 1000 else str(count)
    return [
        Figure(f"{label} forgotten: resolved by check-back", committed, "sent", count, "msg", 1.0),
        Figure(
            f"{label} forgotten: slowest first check",
            slowest_s,
            f"timeout {TRANSACTION_TIMEOUT_S:.0f} s + 2 scans of {SCAN_INTERVAL_S:.0f} s",
            bound_s,
            "s",
            1.0,
            higher_is_better=False,
        ),
    ]
