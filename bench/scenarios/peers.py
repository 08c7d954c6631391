"""Peers a user would pick instead of Petrel for an HTTP queue, measured with the same load as our single sends.

Issue 29's peers: a FastAPI + Redis Streams endpoint (bench.redis_endpoint, one
XADD a POST: what a team writes in an afternoon), always; and, with
`petrel bench --peers`, RabbitMQ's HTTP publish API (bench.rabbitmq_reference:
a durable queue, persistent messages; its management plugin is enabled when
off, and the run says so). Both take wrk's single sends of 1 KiB over 32
connections, as the gateway does, and are measured with no Petrel running.
`petrel bench peers [--peers]` measures them beside the gateway's single sends alone;
`petrel bench datapath` puts them beside its other figures.
"""

from __future__ import annotations

import uuid

from bench.cluster import petrel_cluster
from bench.figures import BenchOptions, Figure
from bench.loopback import served_process
from bench.progress import measuring
from bench.rabbitmq_reference import management_api, publishes
from bench.redis_endpoint import delete_stream
from bench.scenarios import gateway
from bench.scenarios.gateway import Timing

REDIS_ENDPOINT_AT_LEAST = 1.5
"""issue 29: single sends at least 1.5x the FastAPI + Redis endpoint's (aim 2.0x)"""


def peers(options: BenchOptions) -> list[Figure]:
    timing = gateway.QUICK if options.quick else gateway.FULL
    redis = redis_endpoint_sends(timing)
    rabbitmq = rabbitmq_publishes(timing) if options.peers else None
    with petrel_cluster() as cluster:
        ours = gateway.sends(gateway.bench_topic(cluster), "single", timing, "single sends")
    return peer_figures(ours, redis, rabbitmq)


def peer_figures(ours: float, redis: float, rabbitmq: float | None) -> list[Figure]:
    """Our single sends beside each peer measured (RabbitMQ's only when it was: None otherwise)."""
    found = [
        Figure(
            "send 1 message vs FastAPI + Redis XADD",
            ours,
            "FastAPI + Redis Streams endpoint, XADD a POST",
            redis,
            "msg/s",
            REDIS_ENDPOINT_AT_LEAST,
        )
    ]
    if rabbitmq is not None:
        found.append(
            Figure(
                "send 1 message vs RabbitMQ HTTP publish",
                ours,
                "RabbitMQ HTTP API, durable queue, persistent",
                rabbitmq,
                "msg/s",
            )
        )
    return found


def redis_endpoint_sends(timing: Timing) -> float:
    """The FastAPI + Redis Streams endpoint's single sends a second (its stream is deleted after)."""
    topic = f"bench-{uuid.uuid4().hex[:12]}"
    with served_process("bench.redis_endpoint:redis_endpoint_app") as server:
        try:
            url = f"http://127.0.0.1:{server.port}/v1/topics/{topic}/messages"
            return gateway.sends(url, "single", timing, "FastAPI + Redis XADD sends")
        finally:
            delete_stream(topic)


def rabbitmq_publishes(timing: Timing) -> float | None:
    """RabbitMQ's HTTP publishes a second; None (said why) when its management API cannot be had."""
    api = management_api()
    if api is None:
        return None
    with measuring("RabbitMQ HTTP publishes"):
        tally = publishes(api, timing.warmup, timing.seconds)
    if tally.errors:
        print(f"  WARNING RabbitMQ: {tally.errors} of {tally.requests} publishes failed; first: {tally.first_error}")
    return tally.succeeded_per_second
