"""What replication costs a send, and how far behind a slave is (issue 16).

Three clusters, one after another in the same run: `petrel up` as it comes (no
replica), `--replicas 1 --async-replication` (ASYNC_MASTER and one slave) and
`--replicas 1` (SYNC_MASTER and one slave: a send is answered once the slave
has it). Each takes datapath's batch load (bench.loadgen: 32 connections,
batches of 32 x 1 KiB, ASYNC_FLUSH) through the gateway.

| figure | ours | reference (same run) | aim |
|---|---|---|---|
| ASYNC_MASTER batches | ASYNC_MASTER + 1 slave | no replica, the same load | 0.8x |
| SYNC_MASTER batches | SYNC_MASTER + 1 slave | no replica, the same load | 0.5x |
| slave lag p99, ms and bytes | master's status every 50 ms under the load | - | - |
| first read on the slave, p50, p99 | from a send's answer to a pull returning it | same read on the master | - |
| failover | kill -9 of the master to the first send the gateway answers | the issue's aim, 10 s | 1.0x |

The first reads (bench.slave_reads) are made in each replicated cluster after
its load, once the slave has caught up, one send at a time; then its master is
killed (bench.failover).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from bench.cluster import Cluster, petrel_cluster, request_json
from bench.failover import failover_seconds
from bench.figures import BenchOptions, Figure
from bench.progress import measuring
from bench.replication_lag import LagSampler, LagSummary, Replicas
from bench.scenarios import gateway
from bench.scenarios.gateway import Timing
from bench.scheduled import percentile
from bench.slave_reads import FirstReads, first_reads, wait_for_topic

ASYNC_AIM = 0.8
SYNC_AIM = 0.5
FAILOVER_AIM_S = 10.0
READS = 200
QUICK_READS = 20
READS_TOPIC = "replication-reads"
MASTER, SLAVE = "broker-a", "broker-a@1"


@dataclass(frozen=True, slots=True)
class Replicated:
    """What one replicated cluster measured."""

    batches: float
    """messages/s"""
    lag: LagSummary
    reads: FirstReads
    failover_s: float
    """kill -9 of the master to the first send answered"""


@dataclass(frozen=True, slots=True)
class Measured:
    no_replica: float
    """messages/s"""
    async_master: Replicated
    sync_master: Replicated


def replication(options: BenchOptions) -> list[Figure]:
    return figures(measure(options))


def figures(measured: Measured) -> list[Figure]:
    both = (("ASYNC", measured.async_master, ASYNC_AIM), ("SYNC", measured.sync_master, SYNC_AIM))
    throughput = [
        Figure(
            f"replication {mode} + 1 slave: batches of 32",
            one.batches,
            "no replica, same load (petrel up)",
            measured.no_replica,
            "msg/s",
            aim,
        )
        for mode, one, aim in both
    ]
    return (
        throughput
        + [f for mode, one, _ in both for f in lag_figures(mode, one.lag)]
        + [f for mode, one, _ in both for f in first_read_figures(mode, one.reads)]
        + [failover_figure(mode, one.failover_s) for mode, one, _ in both]
    )


def failover_figure(mode: str, seconds: float) -> Figure:
    return Figure(
        f"replication {mode}: failover, kill -9 to first send",
        seconds,
        "the issue's aim",
        FAILOVER_AIM_S,
        "s",
        target_ratio=1.0,
        higher_is_better=False,
    )


def lag_figures(mode: str, lag: LagSummary) -> list[Figure]:
    return [
        Figure(f"replication {mode}: slave lag p99", lag.p99_ms, "-", 0, "ms"),
        Figure(f"replication {mode}: slave lag p99, bytes", lag.p99_bytes, "-", 0, "bytes"),
    ]


def first_read_figures(mode: str, reads: FirstReads) -> list[Figure]:
    return [
        Figure(
            f"replication {mode}: first read on slave p{q}",
            percentile(reads.slave_ms, q / 100),
            f"same read on the master, p{q}",
            percentile(reads.master_ms, q / 100),
            "ms",
            higher_is_better=False,
        )
        for q in (50, 99)
    ]


def measure(options: BenchOptions) -> Measured:
    timing = gateway.QUICK if options.quick else gateway.FULL
    reads = QUICK_READS if options.quick else READS
    os.sync()  # so that writeback left by an earlier scenario does not run during the measurements
    with petrel_cluster() as cluster:
        no_replica = gateway.sends(f"{gateway.bench_topic(cluster)}:batch", "batch", timing, "batches, no replica")
    return Measured(
        no_replica=no_replica,
        async_master=replicated(timing, reads, async_replication=True),
        sync_master=replicated(timing, reads, async_replication=False),
    )


def replicated(timing: Timing, reads: int, async_replication: bool) -> Replicated:
    """The batch load with the slave's lag sampled, then `reads` first reads, in a cluster with one slave."""
    role = "ASYNC_MASTER" if async_replication else "SYNC_MASTER"
    os.sync()
    with petrel_cluster(replicas=1, async_replication=async_replication) as cluster:
        replicas = replicas_of(cluster)
        batches_url = f"{gateway.bench_topic(cluster)}:batch"
        replicas.wait_in_sync()
        with LagSampler(replicas, after=timing.warmup) as sampler:
            batches = gateway.sends(batches_url, "batch", timing, f"batches, {role} + 1 slave")
        lag = sampler.summary()
        print(f"  {role} slave lag: {lag.line()}", flush=True)
        if lag.out_of_sync:
            print(f"  WARNING {role}: the slave was out of the in-sync set in {lag.out_of_sync} samples", flush=True)
        request_json("PUT", f"{cluster.url}/v1/topics/{READS_TOPIC}", {"queues": 1})
        wait_for_topic(replicas, READS_TOPIC)
        replicas.wait_caught_up()
        with measuring(f"{reads} first reads from the slave, {role}"):
            found = first_reads(cluster.url, READS_TOPIC, replicas, reads)
        _note_reads(role, found)
        failover = failover_seconds(cluster, MASTER, READS_TOPIC)
        print(f"  {role} failover: first send answered {failover:.2f} s after kill -9 of the master", flush=True)
    return Replicated(batches, lag, found, failover)


def replicas_of(cluster: Cluster) -> Replicas:
    return Replicas(cluster.url_of(MASTER), cluster.url_of(SLAVE), cluster.internal_headers())


def _note_reads(role: str, reads: FirstReads) -> None:
    def spread(ms: list[float]) -> str:
        return f"p50 {percentile(ms, 0.5):.2f}, p99 {percentile(ms, 0.99):.2f}, max {max(ms):.2f} ms"

    print(f"  {role} first reads: slave {spread(reads.slave_ms)}; master {spread(reads.master_ms)}", flush=True)
