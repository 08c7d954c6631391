"""The public send path end to end, on real processes over loopback (issue: gateway data path).

A cluster started by the launcher is driven by a load generator in a process
of its own (wrk, bench.wrk: 32 keep-alive connections, 1 KiB bodies; the
Python bench.loadgen with BENCH_LOADGEN=python, or when wrk cannot be had), so
client and servers share the two cores as they would in a deployment. References, in the
same run: a FastAPI no-op endpoint served as the gateway is (bench.noop_server)
for single sends; Redis Streams XADD pipelined 32 at a time by 32 clients for
batches (redis-benchmark, bench.redis_benchmark: a C client, as wrk is; the
shared Redis for ASYNC_FLUSH, a private `appendfsync always` one for
SYNC_FLUSH). Target ratios are issue 15's (`petrel bench datapath` reports the
same figures beside the rest of the data path).

The cost of API keys: the same single sends against two clusters up at once,
one with PETREL_AUTH=off, one with PETREL_AUTH=required whose load carries a
key made with `petrel keys create` (pub and admin, 1,000,000 calls a second: a
finite rate, so the rate limiter counts every call); their loads alternate,
`rounds` times, and the medians are compared. `BENCH_GATEWAY_ONLY=auth` runs
this figure alone.

With `--colocated`, single sends and batches are measured on a colocated cluster too
(`petrel up --colocated`: the gateway and broker-a in one process), beside the same
references. `BENCH_GATEWAY_ONLY=single` measures single sends alone (separate, colocated
with `--colocated`, and the no-op), for a quick comparison.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from bench import redis_benchmark
from bench.cluster import SHARED_REDIS, Cluster, api_key, petrel_cluster, request_json, until_admitted
from bench.figures import BenchOptions, Figure
from bench.loadgen import API_KEY_ENV, Tally
from bench.loopback import served_module
from bench.progress import measuring
from bench.redis_reference import private_redis
from bench.wrk import WrkMissing, wrk_binary, wrk_sends

TOPIC = "bench"
QUEUES = 8
ONLY_ENV = "BENCH_GATEWAY_ONLY"
LOADGEN_ENV = "BENCH_LOADGEN"
"""`python`: the HTTP sends are driven by bench.loadgen (aiohttp) rather than wrk, to compare the two"""
KEY_RATE = 1_000_000.0
"""the bench key's calls a second: far above what one gateway answers, but finite, so every call is counted"""


@dataclass(frozen=True, slots=True)
class Timing:
    warmup: float
    seconds: float


FULL = Timing(2.0, 8.0)
QUICK = Timing(0.5, 1.5)
SYNC_FLUSH = {"PETREL_BROKER_FLUSH_MODE": "SYNC_FLUSH"}
"""a cluster whose broker answers a send once it is fsynced"""


def gateway(options: BenchOptions) -> list[Figure]:
    timing = QUICK if options.quick else FULL
    rounds = 1 if options.quick else 3
    os.sync()  # so that writeback left by an earlier scenario does not run during the measurements
    only = os.environ.get(ONLY_ENV)
    if only == "auth":
        return [auth_cost(timing, rounds)]
    if only == "single":
        return single_sends_only(timing, options.colocated)
    with petrel_cluster() as cluster:
        messages = bench_topic(cluster)
        single = sends(messages, "single", timing, "single sends")
        batch = sends(f"{messages}:batch", "batch", timing, "batches")
    colocated: list[tuple[float, float]] = []
    if options.colocated:
        with petrel_cluster(colocated=True) as cluster:
            messages = bench_topic(cluster)
            single_c = sends(messages, "single", timing, "single sends, colocated")
            colocated.append((single_c, sends(f"{messages}:batch", "batch", timing, "batches, colocated")))
    noop = noop_sends(timing)
    redis_async = redis_batches(SHARED_REDIS, timing, "Redis XADD batches")
    with petrel_cluster(SYNC_FLUSH) as cluster:
        sync_batch = sends(f"{bench_topic(cluster)}:batch", "batch", timing, "SYNC_FLUSH batches")
    with private_redis() as url:
        redis_sync = redis_batches(url, timing, "Redis appendfsync always batches")
    return [
        single_send_figure(single, noop),
        *(colocated_send_figure(single_c, noop) for single_c, _ in colocated),
        batch_figure(batch, redis_async),
        *(colocated_batch_figure(batch_c, redis_async) for _, batch_c in colocated),
        sync_batch_figure(sync_batch, redis_sync),
        auth_cost(timing, rounds),
    ]


def single_sends_only(timing: Timing, colocated: bool) -> list[Figure]:
    """Single sends on separate services (and colocated), and the no-op, one after another."""
    with petrel_cluster() as cluster:
        single = sends(bench_topic(cluster), "single", timing, "single sends")
    figures = []
    if colocated:
        with petrel_cluster(colocated=True) as cluster:
            figures.append(sends(bench_topic(cluster), "single", timing, "single sends, colocated"))
    noop = noop_sends(timing)
    return [single_send_figure(single, noop), *(colocated_send_figure(ours, noop) for ours in figures)]


def colocated_send_figure(ours: float, noop: float) -> Figure:
    return Figure(
        "gateway: send 1 message, colocated, 32 conns",
        ours,
        "FastAPI no-op POST, typed body, same server",
        noop,
        "msg/s",
        1.0,
    )


def colocated_batch_figure(ours: float, redis: float) -> Figure:
    return Figure(
        "gateway: batches of 32, colocated, 32 conns", ours, "Redis XADD pipelined 32, 32 clients", redis, "msg/s", 0.4
    )


def single_send_figure(ours: float, noop: float) -> Figure:
    return Figure(
        "gateway: send 1 message, 32 conns", ours, "FastAPI no-op POST, typed body, same server", noop, "msg/s", 0.9
    )  # issue 29's "at least" (issue 15 asked 0.8)


def batch_figure(ours: float, redis: float) -> Figure:
    return Figure(
        "gateway: batches of 32, 32 conns", ours, "Redis XADD pipelined 32, 32 clients", redis, "msg/s", 0.4
    )  # issue 29


def sync_batch_figure(ours: float, redis: float) -> Figure:
    return Figure(
        "gateway: SYNC_FLUSH batches of 32", ours, "same, redis-server appendfsync always", redis, "msg/s", 0.5
    )


def bench_topic(cluster: Cluster) -> str:
    """Create the topic the sends go to; the URL of its messages."""
    request_json("PUT", f"{cluster.url}/v1/topics/{TOPIC}", {"queues": QUEUES})
    return f"{cluster.url}/v1/topics/{TOPIC}/messages"


def noop_sends(timing: Timing) -> float:
    """The single-send reference's messages/s (bench.noop_server)."""
    with served_module("bench.noop_server") as port:
        return sends(f"http://127.0.0.1:{port}/v1/topics/{TOPIC}/messages", "single", timing, "FastAPI no-op sends")


def redis_batches(url: str, timing: Timing, what: str) -> float:
    """The batch reference's messages/s: XADD pipelined 32 at a time by 32 clients of the Redis at `url`, driven by
    redis-benchmark (bench.redis_benchmark); by bench.redis_reference's Python clients without it (said)."""
    if os.environ.get(LOADGEN_ENV, "wrk") != "python":
        with measuring(what):
            tally = redis_benchmark.xadds(url, timing.warmup, timing.seconds)
        if tally is not None:
            if tally.errors:
                print(f"  WARNING {what}: {tally.first_error}", flush=True)
            return tally.succeeded_per_second
        print(
            f"  WARNING redis-benchmark is not installed (Debian: redis-tools): {what} by redis-py clients", flush=True
        )
    return run_tally([sys.executable, "-m", "bench.redis_reference", url], timing, what)


def auth_cost(timing: Timing, rounds: int) -> Figure:
    """Single sends with auth on beside auth off: two clusters up at once, their loads alternating."""
    os.sync()
    on_runs: list[float] = []
    off_runs: list[float] = []
    with petrel_cluster({"PETREL_AUTH": "off"}) as off, petrel_cluster({"PETREL_AUTH": "required"}) as on:
        bench_topic(off)
        key = api_key(on, "bench", ["pub", "admin"], KEY_RATE)
        until_admitted("PUT", f"{on.url}/v1/topics/{TOPIC}", {"queues": QUEUES}, key)
        for n in range(rounds):
            if n % 2 == 1:
                on_runs.append(_single_sends(on, timing, key))
            off_runs.append(_single_sends(off, timing))
            if n % 2 == 0:
                on_runs.append(_single_sends(on, timing, key))
    if rounds > 1:
        ratios = ", ".join(f"{a / b:.2f}x" if b else "-" for a, b in zip(on_runs, off_runs, strict=True))
        print(f"  auth on / off, round by round: {ratios}", flush=True)
    name = "gateway: send 1 message, auth on, 32 conns" + (f" (median of {rounds})" if rounds > 1 else "")
    on_s, off_s = statistics.median(on_runs), statistics.median(off_runs)
    return Figure(name, on_s, "same, PETREL_AUTH=off", off_s, "msg/s", 0.95)


def _single_sends(cluster: Cluster, timing: Timing, key: str | None = None) -> float:
    """Single sends' messages/s; with a key, every send must have been let in (a refusal measures nothing)."""
    url = f"{cluster.url}/v1/topics/{TOPIC}/messages"
    what = "single sends, auth " + ("on" if key else "off")
    tally = send_tally(url, "single", timing, what, key)
    if key and tally.errors:
        raise RuntimeError(f"auth on: {tally.errors} of {tally.requests} sends failed; first: {tally.first_error}")
    return tally.succeeded_per_second


def sends(url: str, kind: str, timing: Timing, what: str) -> float:
    """`kind` of sends to `url` over 32 connections (wrk; bench.loadgen with BENCH_LOADGEN=python): messages/s
    answered (failures are reported, not counted)."""
    tally = send_tally(url, kind, timing, what)
    if tally.errors:
        print(f"  WARNING {what}: {tally.errors} of {tally.requests} requests failed; first: {tally.first_error}")
    return tally.succeeded_per_second


def send_tally(url: str, kind: str, timing: Timing, what: str, api_key: str | None = None) -> Tally:
    """The Tally of `kind` sends to `url`, by wrk, or by bench.loadgen when BENCH_LOADGEN=python or wrk cannot be
    had (said in a warning: its figures are then the Python client's, not comparable with wrk's)."""
    if os.environ.get(LOADGEN_ENV, "wrk") != "python":
        try:
            wrk_binary()
        except WrkMissing as exc:
            print(f"  WARNING {exc}; {what} falls back to the Python load generator (bench.loadgen)", flush=True)
        else:
            with measuring(what):
                return wrk_sends(url, kind, timing.warmup, timing.seconds, api_key)
    command = [sys.executable, "-m", "bench.loadgen", url, kind]
    return load_tally(command, timing, what, {API_KEY_ENV: api_key} if api_key else None)


def run_tally(command: list[str], timing: Timing, what: str) -> float:
    """Run a load process (the measurement `what`); messages/s of its successful answers (failures are
    reported, not counted)."""
    tally = load_tally(command, timing, what)
    if tally.errors:
        print(
            f"  WARNING {command[3]}: {tally.errors} of {tally.requests} requests failed; first: {tally.first_error}",
            flush=True,
        )
    return tally.succeeded_per_second


def load_tally(command: list[str], timing: Timing, what: str, env: dict[str, str] | None = None) -> Tally:
    """Run a load process (the measurement `what`, with `env` added to this one's) and read the tally it
    prints last."""
    limit = timing.warmup + timing.seconds + 120
    with measuring(what):
        done = subprocess.run(
            [*command, str(timing.warmup), str(timing.seconds)],
            capture_output=True,
            text=True,
            timeout=limit,
            check=False,
            env=os.environ | (env or {}),
        )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[2:4])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    fields: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return Tally(**fields)
