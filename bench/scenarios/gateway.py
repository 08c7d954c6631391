"""The public send path end to end, on real processes over loopback (issue: gateway data path).

A cluster started by the launcher is driven by a load generator in a process
of its own (bench.loadgen, 32 keep-alive aiohttp connections), so client and
servers share the two cores as they would in a deployment. References, in the
same run: a FastAPI no-op endpoint under uvicorn for single sends; Redis
Streams XADD pipelined 32 at a time for batches (the shared Redis for
ASYNC_FLUSH, a private `appendfsync always` one for SYNC_FLUSH).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from bench.cluster import SHARED_REDIS, petrel_cluster, request_json
from bench.harness import BenchOptions, Figure, scenario
from bench.loopback import served
from bench.redis_reference import private_redis

TOPIC = "bench"
QUEUES = 8


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
    os.sync()  # so that writeback left by an earlier scenario does not run during the measurements
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
    ]


def _load(url: str, kind: str, timing: Timing) -> float:
    return run_tally([sys.executable, "-m", "bench.loadgen", url, kind], timing)


def run_tally(command: list[str], timing: Timing) -> float:
    """Run a load process; messages/s of its successful answers (failures are reported, not counted)."""
    limit = timing.warmup + timing.seconds + 120
    done = subprocess.run(
        [*command, str(timing.warmup), str(timing.seconds)], capture_output=True, text=True, timeout=limit, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[2:4])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    tally: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if tally["errors"]:
        print(
            f"  WARNING {command[3]}: {tally['errors']} of {tally['requests']} requests failed; "
            f"first: {tally['first_error']}",
            flush=True,
        )
    good = tally["requests"] - tally["errors"]
    return float(good * tally["messages_per_request"] / tally["seconds"])
