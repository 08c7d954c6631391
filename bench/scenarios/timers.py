"""Scheduled delivery end to end, on real processes (issue: scheduled delivery).

A cluster started by the launcher (one broker, the timer at 100 ms precision)
is sent exact-time messages through the gateway in batches of 256; each body
is the message's index, so what arrives in the real topic is matched to the
`deliver_at` its send answer gave. Lateness = `stored_at` in the real topic
minus that `deliver_at`. Figures, each beside its target:

- lateness p50/p99 with 2,000 timers firing per second;
- a burst: N messages due in the same millisecond, until the last is in the topic;
- the timer's resident memory holding 1M pending messages, and the send rate of
  delayed batches against the same batches without delay (bench.loadgen, a
  load process of its own, as in the gateway scenario);
- kill -9 of the timer with messages pending, restarted by hand (the launcher
  does not restart children) with the launcher's command and environment:
  how many are lost, and how many delivered twice.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass

from bench.cluster import Cluster, petrel_cluster, request_json
from bench.figures import BenchOptions, Figure
from bench.scenarios.gateway import Timing, sends
from bench.scheduled import (
    cmdline_of,
    environ_of,
    kill_hard,
    now_ms,
    percentile,
    process,
    read_topic,
    restarted,
    rss_mb,
    send_scheduled,
    timer_stats,
    wait_delivered,
    warnings_in,
)

QUEUES = 4
TIMER_ENV = {"PETREL_TIMER_PRECISION_MS": "100", "PETREL_TIMER_SCAN_INTERVAL_MS": "100"}
HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Sizes:
    lateness_count: int
    lateness_span_s: float
    lateness_lead_s: float
    burst_count: int
    burst_lead_s: float
    capacity_count: int
    throughput: Timing
    crash_count: int
    crash_span_s: float
    crash_lead_s: float
    wait_s: float
    """How long to wait for deliveries after the last is due."""


FULL = Sizes(20_000, 10.0, 5.0, 100_000, 20.0, 1_000_000, Timing(2.0, 8.0), 100_000, 20.0, 12.0, 120.0)
QUICK = Sizes(6_000, 3.0, 3.0, 10_000, 6.0, 100_000, Timing(0.5, 1.5), 10_000, 8.0, 4.0, 60.0)
KILL_AFTER_S = 3.0


def timers(options: BenchOptions) -> list[Figure]:
    import uvloop

    sizes = QUICK if options.quick else FULL
    os.sync()
    figures: list[Figure] = []
    # A cluster per phase that may leave the timer busy (a burst it cannot deliver is retried every second,
    # which would weigh on whatever runs next in the same cluster).
    with petrel_cluster(TIMER_ENV) as cluster:
        figures += uvloop.run(_lateness(cluster, sizes))
        figures += _throughput(cluster, sizes)
        figures += uvloop.run(_capacity(cluster, sizes))
    with petrel_cluster(TIMER_ENV) as cluster:
        figures += uvloop.run(_burst(cluster, sizes))
    with petrel_cluster(TIMER_ENV) as cluster:
        figures += uvloop.run(_crash(cluster, sizes))
    return figures


def _topic(cluster: Cluster, topic: str) -> None:
    request_json("PUT", f"{cluster.url}/v1/topics/{topic}", {"queues": QUEUES})


async def _lateness(cluster: Cluster, sizes: Sizes) -> list[Figure]:
    topic, count = "timers-lateness", sizes.lateness_count
    _topic(cluster, topic)
    first = now_ms() + int(sizes.lateness_lead_s * 1000)
    span = int(sizes.lateness_span_s * 1000)
    sent = await send_scheduled(cluster.url, topic, count, lambda i: first + i * span // count)
    _note_send("lateness", count, sent.seconds, sent.finished_at_ms, first)
    await asyncio.sleep(max(0.0, (first + span - now_ms()) / 1000))
    if not await wait_delivered(cluster.url, topic, QUEUES, len(sent.deliver_at), sizes.wait_s):
        print(f"  WARNING lateness: not all delivered {sizes.wait_s:.0f} s after the last was due; the timer's log:")
        print(warnings_in(cluster.data_dir / "logs" / "timer.log"), flush=True)
    delivered = await read_topic(cluster.url, topic, QUEUES)
    late = [m.stored_at - sent.deliver_at[int(m.body)] for m in delivered]
    stats = await timer_stats(cluster.url)
    rate = count / sizes.lateness_span_s
    print(
        f"  lateness: {len(delivered):,} of {count:,} delivered at {rate:,.0f}/s; "
        f"p50 {percentile(late, 0.5):.0f} ms, p99 {percentile(late, 0.99):.0f} ms, max {max(late, default=0):.0f} ms; "
        f"the timer's own sample: {stats['lateness']}",
        flush=True,
    )
    return [
        Figure("timer lateness p99", percentile(late, 0.99), "target", 200, "ms", 1.0, higher_is_better=False),
        Figure("timer lateness p50", percentile(late, 0.5), "target", 100, "ms", 1.0, higher_is_better=False),
    ]


async def _burst(cluster: Cluster, sizes: Sizes) -> list[Figure]:
    topic, count = "timers-burst", sizes.burst_count
    _topic(cluster, topic)
    due = now_ms() + int(sizes.burst_lead_s * 1000)
    sent = await send_scheduled(cluster.url, topic, count, lambda _: due)
    _note_send("burst", count, sent.seconds, sent.finished_at_ms, due)
    await asyncio.sleep(max(0.0, (due - now_ms()) / 1000))
    if not await wait_delivered(cluster.url, topic, QUEUES, len(sent.deliver_at), sizes.wait_s):
        print(
            f"  WARNING burst: not all delivered {sizes.wait_s:.0f} s after they were due; the timer's log:", flush=True
        )
        print(warnings_in(cluster.data_dir / "logs" / "timer.log"), flush=True)
    delivered = await read_topic(cluster.url, topic, QUEUES)
    late = sorted(m.stored_at - sent.deliver_at[int(m.body)] for m in delivered)
    last = sizes.wait_s * 1000 if len(delivered) < count else late[-1]
    print(
        f"  burst: {len(delivered):,} of {count:,} delivered; first {late[0] if late else 0} ms after due, "
        f"half by {percentile(late, 0.5):.0f} ms, last {last:.0f} ms",
        flush=True,
    )
    name = f"{count // 1000}k due in one second: all delivered"
    return [Figure(name, last / 1000, "target", 10, "s", 1.0, higher_is_better=False)]


def _throughput(cluster: Cluster, sizes: Sizes) -> list[Figure]:
    topic = "timers-throughput"
    _topic(cluster, topic)
    url = f"{cluster.url}/v1/topics/{topic}/messages:batch"
    plain = sends(url, "batch", sizes.throughput, "batches")
    delayed = sends(url, "delayed", sizes.throughput, "delayed batches")
    return [
        Figure(
            "delayed send throughput (32 x 1 KiB, 1 h)",
            delayed,
            "same batches, no delay",
            plain,
            "msg/s",
            0.8,
        )
    ]


async def _capacity(cluster: Cluster, sizes: Sizes) -> list[Figure]:
    topic, count = "timers-capacity", sizes.capacity_count
    _topic(cluster, topic)
    pid = int(process(cluster, "timer")["pid"])
    before = (await timer_stats(cluster.url))["wheel_pending"]
    rss_before = rss_mb(pid)
    due = now_ms() + HOUR_MS
    sent = await send_scheduled(cluster.url, topic, count, lambda i: due + i % 1000, keep=False)
    print(f"  capacity: sent {count:,} in {sent.seconds:.1f} s ({count / sent.seconds:,.0f} msg/s)", flush=True)
    want = before + count - sent.errors
    deadline = time.monotonic() + sizes.wait_s * 2
    pending = before
    while time.monotonic() < deadline:
        pending = (await timer_stats(cluster.url))["wheel_pending"]
        if pending >= want:
            break
        await asyncio.sleep(0.5)
    else:
        print(f"  WARNING capacity: the wheel holds {pending:,} of {want:,} after waiting", flush=True)
    rss = rss_mb(pid)
    print(f"  capacity: wheel_pending {pending:,}; timer RSS {rss_before:.0f} MB before, {rss:.0f} MB now", flush=True)
    name = f"timer RSS with {count // 1000:,}k pending" if count < 1_000_000 else "timer RSS with 1M pending"
    return [Figure(name, rss, "target", 300, "MB", 1.0, higher_is_better=False)]


async def _crash(cluster: Cluster, sizes: Sizes) -> list[Figure]:
    topic, count = "timers-crash", sizes.crash_count
    _topic(cluster, topic)
    timer = process(cluster, "timer")
    pid = int(timer["pid"])
    env, command = environ_of(pid), cmdline_of(pid)
    first = now_ms() + int(sizes.crash_lead_s * 1000)
    span = int(sizes.crash_span_s * 1000)
    sent = await send_scheduled(cluster.url, topic, count, lambda i: first + i * span // count)
    _note_send("crash", count, sent.seconds, sent.finished_at_ms, first)
    await asyncio.sleep(max(0.0, (first + int(KILL_AFTER_S * 1000) - now_ms()) / 1000))
    before_kill = sum(1 for _ in await read_topic(cluster.url, topic, QUEUES))
    kill_hard(pid)
    print(f"  crash: killed the timer (pid {pid}) with {before_kill:,} of {count:,} delivered", flush=True)
    log = cluster.data_dir / "timer-restarted.log"
    with restarted(command, env, str(timer["url"]), log):
        complete = await wait_delivered(cluster.url, topic, QUEUES, len(sent.deliver_at), sizes.crash_span_s + 120)
        if not complete:
            print("  WARNING crash: not all delivered within the wait after the restart; the restarted timer's log:")
            print(warnings_in(log), flush=True)
        await asyncio.sleep(2.0)  # anything repeated after the last one arrives
        delivered = await read_topic(cluster.url, topic, QUEUES)
    seen = {m.body for m in delivered}
    lost = sum(1 for i in sent.deliver_at if f"{i:016d}" not in seen)
    twice = len(delivered) - len(seen)
    late = [m.stored_at - sent.deliver_at[int(m.body)] for m in delivered]
    print(
        f"  crash: {len(seen):,} of {len(sent.deliver_at):,} delivered, {lost:,} lost, {twice:,} twice; "
        f"lateness p99 {percentile(late, 0.99):.0f} ms, max {max(late, default=0):.0f} ms",
        flush=True,
    )
    size = f"{count // 1000}k"
    return [
        Figure(f"timer kill -9 with {size} pending: lost", lost, "none lost", 0, "msgs", 1.0, higher_is_better=False),
        Figure("timer kill -9: delivered twice", twice, "none", 0, "msgs", None, higher_is_better=False),
    ]


def _note_send(phase: str, count: int, seconds: float, finished_at_ms: int, first_due_ms: int) -> None:
    margin = (first_due_ms - finished_at_ms) / 1000
    print(f"  {phase}: sent {count:,} in {seconds:.1f} s ({count / seconds:,.0f} msg/s), {margin:.1f} s before due")
    if margin < 0:
        print(f"  WARNING {phase}: sending ended {-margin:.1f} s after the first was due", flush=True)
