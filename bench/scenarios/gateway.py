"""The public send path end to end, on real processes over loopback (issue: gateway data path).

A cluster started by the launcher is driven by a load generator in a process
of its own (bench.loadgen, 32 keep-alive aiohttp connections), so client and
servers share the two cores as they would in a deployment. References, in the
same run: a FastAPI no-op endpoint under uvicorn for single sends; Redis
Streams XADD pipelined 32 at a time for batches (the shared Redis for
ASYNC_FLUSH, a private `appendfsync always` one for SYNC_FLUSH).

The cost of API keys: the same single sends against two clusters up at once,
one with PETREL_AUTH=off, one with PETREL_AUTH=required whose load carries a
key made with `petrel keys create` (pub and admin, 1,000,000 calls a second: a
finite rate, so the rate limiter counts every call); their loads alternate,
`rounds` times, and the medians are compared. `BENCH_GATEWAY_ONLY=auth` runs
this figure alone.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from bench.cluster import SHARED_REDIS, Cluster, api_key, petrel_cluster, request_json, until_admitted
from bench.harness import BenchOptions, Figure, scenario
from bench.loadgen import API_KEY_ENV, Tally
from bench.loopback import served
from bench.redis_reference import private_redis

TOPIC = "bench"
QUEUES = 8
ONLY_ENV = "BENCH_GATEWAY_ONLY"
KEY_RATE = 1_000_000.0
"""the bench key's calls a second: far above what one gateway answers, but finite, so every call is counted"""


@dataclass(frozen=True, slots=True)
class Timing:
    warmup: float
    seconds: float


class NoopMessage(BaseModel):
    body: str
    tag: str


def noop_app() -> FastAPI:
    """The single-send reference: the same JSON parsed into a pydantic model, answered at once."""
    app = FastAPI()

    @app.post("/v1/topics/{topic}/messages")
    async def send(topic: str, message: NoopMessage) -> dict[str, bool]:
        return {"ok": True}

    return app


@scenario("gateway")
def gateway(options: BenchOptions) -> list[Figure]:
    timing = Timing(0.5, 1.5) if options.quick else Timing(2.0, 8.0)
    rounds = 1 if options.quick else 3
    os.sync()  # so that writeback left by an earlier scenario does not run during the measurements
    if os.environ.get(ONLY_ENV) == "auth":
        return [auth_cost(timing, rounds)]
    with petrel_cluster() as cluster:
        request_json("PUT", f"{cluster.url}/v1/topics/{TOPIC}", {"queues": QUEUES})
        single = _load(f"{cluster.url}/v1/topics/{TOPIC}/messages", "single", timing)
        batch = _load(f"{cluster.url}/v1/topics/{TOPIC}/messages:batch", "batch", timing)
    with served("bench.scenarios.gateway:noop_app") as port:
        noop = _load(f"http://127.0.0.1:{port}/v1/topics/{TOPIC}/messages", "single", timing)
    redis_async = run_tally([sys.executable, "-m", "bench.redis_reference", SHARED_REDIS], timing)
    with petrel_cluster({"PETREL_BROKER_FLUSH_MODE": "SYNC_FLUSH"}) as cluster:
        request_json("PUT", f"{cluster.url}/v1/topics/{TOPIC}", {"queues": QUEUES})
        sync_batch = _load(f"{cluster.url}/v1/topics/{TOPIC}/messages:batch", "batch", timing)
    with private_redis() as url:
        redis_sync = run_tally([sys.executable, "-m", "bench.redis_reference", url], timing)
    return [
        Figure("gateway: send 1 message, 32 conns", single, "FastAPI no-op POST, pydantic body", noop, "msg/s", 0.6),
        Figure(
            "gateway: batches of 32, 32 conns", batch, "Redis XADD pipelined 32, 32 clients", redis_async, "msg/s", 0.75
        ),
        Figure(
            "gateway: SYNC_FLUSH batches of 32",
            sync_batch,
            "same, redis-server appendfsync always",
            redis_sync,
            "msg/s",
            1.0,
        ),
        auth_cost(timing, rounds),
    ]


def auth_cost(timing: Timing, rounds: int) -> Figure:
    """Single sends with auth on beside auth off: two clusters up at once, their loads alternating."""
    os.sync()
    on_runs: list[float] = []
    off_runs: list[float] = []
    with petrel_cluster({"PETREL_AUTH": "off"}) as off, petrel_cluster({"PETREL_AUTH": "required"}) as on:
        request_json("PUT", f"{off.url}/v1/topics/{TOPIC}", {"queues": QUEUES})
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
    tally = load_tally(
        [sys.executable, "-m", "bench.loadgen", url, "single"], timing, {API_KEY_ENV: key} if key else None
    )
    if key and tally.errors:
        raise RuntimeError(f"auth on: {tally.errors} of {tally.requests} sends failed; first: {tally.first_error}")
    return tally.succeeded_per_second


def _load(url: str, kind: str, timing: Timing) -> float:
    return run_tally([sys.executable, "-m", "bench.loadgen", url, kind], timing)


def run_tally(command: list[str], timing: Timing) -> float:
    """Run a load process; messages/s of its successful answers (failures are reported, not counted)."""
    tally = load_tally(command, timing)
    if tally.errors:
        print(
            f"  WARNING {command[3]}: {tally.errors} of {tally.requests} requests failed; first: {tally.first_error}",
            flush=True,
        )
    return tally.succeeded_per_second


def load_tally(command: list[str], timing: Timing, env: dict[str, str] | None = None) -> Tally:
    """Run a load process (with `env` added to this one's) and read the tally it prints last."""
    limit = timing.warmup + timing.seconds + 120
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
