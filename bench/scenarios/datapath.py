"""The data path at the speed of its references (issue 15): eight figures in one run, each beside its reference.

| figure | ours | reference (same run) | target |
|---|---|---|---|
| single send | gateway, 32 connections, 1 KiB | FastAPI no-op POST, typed body, served as the gateway is | 0.9x |
| single send | the same | a FastAPI + Redis Streams endpoint, XADD a POST (bench.redis_endpoint) | 1.5x |
| single send (`--peers`) | the same | RabbitMQ's HTTP publish API, durable queue, persistent messages | - |
| batches | 32 x 1 KiB a request | Redis XADD pipelined 32, 32 clients | 0.4x |
| SYNC_FLUSH batches | the same, broker in SYNC_FLUSH | Redis `appendfsync always`, pipelined 32 | 0.5x |
| receive+ack | batches of 32, 8 consumers | Redis XREADGROUP COUNT 32 + XACK, 8 clients | 0.4x |
| send-to-receive | long polls, 1,000 msg/s, p99 | 5 ms (the issue's aim: 2 ms) | 1.0x |
| (info) the generator's own p99 | the same paced sends to the FastAPI no-op, round trip | - | - |
| store append | batches of 32, in-process | bare mmap packing loop | 0.6x |
| half + commit | pairs, 32 connections | two single sends (half their rate) | 1.0x |
| durable publish | SYNC_FLUSH single sends, 32 connections, 1 KiB | NATS JetStream publish + ack, 32 in flight | 0.3x |

The targets are issue 29's "at least" where it names one (issue 15's 0.8x and 0.5x
before), and issue 15's for the SYNC_FLUSH batches and the durable publish.
Every HTTP send is driven by wrk (bench.wrk), ours and the references' alike,
and a backlog's consumers run in 2 processes (bench.drain_processes), so that
the load generator is not what limits a figure. Every figure is measured by the
scenario that owns it (gateway, peers, consumers, storage, transactions), with
its sizes and its Figure; this one runs them in one go, sharing clusters where
a figure allows: the references and peers first (no Petrel running beside
them), then a cluster for the sends (single, half + commit, batches), a fresh
one for the consumers (as `petrel bench consumers` measures them), a SYNC_FLUSH
one for the fsynced sends, and the store in-process last. The NATS reference
(bench.nats_reference) needs the local NATS server with JetStream on
127.0.0.1:4222; without one the durable-publish figure is left out, with a
message saying why, and the other figures stand.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from bench.cluster import SHARED_REDIS, petrel_cluster
from bench.drain import Drain
from bench.figures import BenchOptions, Figure
from bench.loopback import served_module
from bench.nats_reference import LOCAL_NATS, answers
from bench.redis_reference import private_redis
from bench.scenarios import consumers, gateway, peers, storage, transactions
from bench.scenarios.gateway import Timing

TOPIC = "datapath"
DURABLE_TARGET = 0.3


@dataclass(frozen=True, slots=True)
class Measured:
    """What the scenario measured, ours and the references, before it is put as Figures."""

    single: float
    noop: float
    redis_endpoint: float
    rabbitmq: float | None
    """None: not asked for (`--peers`), or RabbitMQ's HTTP API could not be had"""
    batch: float
    redis_batch: float
    sync_batch: float
    redis_sync_batch: float
    drain: Drain
    redis_drain: Drain
    p99_ms: float
    noop_p99_ms: float
    """The same paced sends to the FastAPI no-op: the load generator's own p99 round trip."""
    store_append: float
    bare_loop: float
    pairs: float
    durable: float
    nats: float | None
    """None: no NATS server with JetStream answered"""


def datapath(options: BenchOptions) -> list[Figure]:
    return figures(measure(options))


def figures(measured: Measured) -> list[Figure]:
    """Issue 15's eight figures in its order (seven when NATS was not there), the peers' after single sends."""
    found = [
        gateway.single_send_figure(measured.single, measured.noop),
        *peers.peer_figures(measured.single, measured.redis_endpoint, measured.rabbitmq),
        gateway.batch_figure(measured.batch, measured.redis_batch),
        gateway.sync_batch_figure(measured.sync_batch, measured.redis_sync_batch),
        consumers.receive_ack_figure(measured.drain, measured.redis_drain),
        consumers.latency_p99_figure(measured.p99_ms),
        consumers.generator_floor_figure(measured.noop_p99_ms),
        storage.batch_append_figure(measured.store_append, measured.bare_loop),
        transactions.half_commit_figure(measured.pairs, measured.single),
    ]
    if measured.nats is None:
        return found
    return [*found, durable_publish_figure(measured.durable, measured.nats)]


def durable_publish_figure(ours: float, nats: float) -> Figure:
    return Figure(
        "durable publish, 32 in flight (SYNC_FLUSH)",
        ours,
        "NATS JetStream publish + ack, file storage",
        nats,
        "msg/s",
        DURABLE_TARGET,
    )


def measure(options: BenchOptions) -> Measured:
    timing = gateway.QUICK if options.quick else gateway.FULL
    sizes = consumers.QUICK if options.quick else consumers.FULL
    os.sync()  # so that writeback left by an earlier scenario does not run during the measurements
    noop = gateway.noop_sends(timing)
    with served_module("bench.noop_server") as port:
        url, label = f"http://127.0.0.1:{port}", "FastAPI no-op, paced sends"
        _, noop_p99_ms = consumers.paced_send_latency(url, gateway.TOPIC, sizes, label)
    redis_endpoint = peers.redis_endpoint_sends(timing)
    rabbitmq = peers.rabbitmq_publishes(timing) if options.peers else None
    redis_batch = gateway.redis_batches(SHARED_REDIS, timing, "Redis XADD batches")
    with private_redis() as url:
        redis_sync_batch = gateway.redis_batches(url, timing, "Redis appendfsync always batches")
    redis_drain = consumers.redis_drain(sizes.backlog)
    nats = nats_publishes(timing)
    with transactions.checkback_receiver() as receiver, petrel_cluster() as cluster:
        topic = transactions.register(cluster, receiver, TOPIC)
        single = gateway.sends(f"{topic}/messages", "single", timing, "single sends")
        pairs = transactions.half_commits(topic, timing)
        batch = gateway.sends(f"{topic}/messages:batch", "batch", timing, "batches")
    with petrel_cluster() as cluster:
        drain = consumers.group_drain(
            cluster, "consume-batch", consumers.QUEUES, sizes.backlog, consumers.CONSUMERS, "before"
        )
        _, p99_ms = consumers.long_poll_latency(cluster, sizes)
    with petrel_cluster(gateway.SYNC_FLUSH) as cluster:
        messages = gateway.bench_topic(cluster)
        sync_batch = gateway.sends(f"{messages}:batch", "batch", timing, "SYNC_FLUSH batches")
        durable = gateway.sends(messages, "single", timing, "SYNC_FLUSH single sends")
    store_append, bare_loop = storage.best_batch_appends(options)
    return Measured(
        single=single,
        noop=noop,
        redis_endpoint=redis_endpoint,
        rabbitmq=rabbitmq,
        batch=batch,
        redis_batch=redis_batch,
        sync_batch=sync_batch,
        redis_sync_batch=redis_sync_batch,
        drain=drain,
        redis_drain=redis_drain,
        p99_ms=p99_ms,
        noop_p99_ms=noop_p99_ms,
        store_append=store_append,
        bare_loop=bare_loop,
        pairs=pairs,
        durable=durable,
        nats=nats,
    )


def nats_publishes(timing: Timing, url: str = LOCAL_NATS) -> float | None:
    """The durable-publish reference's messages/s; None (said why) when no NATS with JetStream is there."""
    if not answers(url):
        print(f"  NATS does not answer on {url}: the durable-publish figure is left out of this run", flush=True)
        return None
    try:
        return gateway.run_tally([sys.executable, "-m", "bench.nats_reference", url], timing, "NATS publishes")
    except RuntimeError as exc:  # a server without JetStream, say: the other figures still stand
        print(f"  NATS at {url} could not be measured; the durable-publish figure is left out: {exc}", flush=True)
        return None
