"""`petrel bench datapath`: issue 15's eight figures and issue 29's peers, their references and target ratios."""

from __future__ import annotations

from dataclasses import replace

from bench.drain import Drain
from bench.scenarios.datapath import Measured, figures

MEASURED = Measured(
    single=4_000,
    noop=10_000,
    redis_endpoint=3_000,
    rabbitmq=700,
    batch=30_000,
    redis_batch=120_000,
    sync_batch=20_000,
    redis_sync_batch=100_000,
    drain=Drain(count=1_000, consumers=8, measured=900, seconds=0.1),
    redis_drain=Drain(count=1_000, consumers=8, measured=900, seconds=0.02),
    p99_ms=20.0,
    noop_p99_ms=12.0,
    store_append=100_000,
    bare_loop=500_000,
    pairs=1_500,
    durable=3_000,
    nats=10_000,
)


def test_the_figures_carry_the_issues_target_ratios_in_its_order_the_peers_after_single_sends() -> None:
    found = figures(MEASURED)

    assert [(f.name, f.target_ratio) for f in found] == [
        ("gateway: send 1 message, 32 conns", 0.9),
        ("send 1 message vs FastAPI + Redis XADD", 1.5),
        ("send 1 message vs RabbitMQ HTTP publish", None),
        ("gateway: batches of 32, 32 conns", 0.4),
        ("gateway: SYNC_FLUSH batches of 32", 0.5),
        ("receive+ack batches of 32, 8 consumers", 0.4),
        ("long poll send-to-receive p99, 1,000/s", 1.0),
        ("load generator's own p99: paced 1,000/s sends to the FastAPI no-op", None),
        ("ASYNC_FLUSH append, batches of 32", 0.6),
        ("half + commit through the gateway, 32 conns", 1.0),
        ("durable publish, 32 in flight (SYNC_FLUSH)", 0.3),
    ]
    assert all(f.unit for f in found)


def test_the_peers_are_beside_the_same_single_sends_and_rabbitmq_only_when_measured() -> None:
    redis, rabbitmq = figures(MEASURED)[1:3]

    assert (redis.ours, redis.reference, redis.ratio) == (4_000, 3_000, 4_000 / 3_000)
    assert (rabbitmq.ours, rabbitmq.reference) == (4_000, 700)
    assert "RabbitMQ" not in " ".join(f.name for f in figures(replace(MEASURED, rabbitmq=None)))


def test_half_commit_is_judged_against_two_single_sends() -> None:
    half_commit = figures(MEASURED)[9]

    assert half_commit.reference_name == "two single sends"
    assert half_commit.reference == 2_000
    assert half_commit.ratio == 0.75


def test_send_to_receive_is_lower_is_better_against_5_ms() -> None:
    latency = figures(MEASURED)[6]

    assert (latency.ours, latency.reference, latency.unit) == (20.0, 5.0, "ms")
    assert not latency.higher_is_better
    assert latency.ratio == 0.25
    assert latency.verdict == "BELOW"


def test_durable_publish_is_beside_nats_jetstream_and_left_out_without_it() -> None:
    durable = figures(MEASURED)[-1]

    assert (durable.ours, durable.reference) == (3_000, 10_000)
    assert durable.reference_name.startswith("NATS JetStream")
    assert len(figures(replace(MEASURED, nats=None))) == 10


def test_the_generators_own_p99_is_shown_beside_the_send_to_receive_p99_and_judged_by_nothing() -> None:
    latency, floor = figures(MEASURED)[6:8]

    assert (latency.ours, floor.ours) == (20.0, 12.0)
    assert (floor.verdict, floor.ratio) == ("info", None)
