"""The console's pages, loaded in a browser, on a cluster of 1,000 topics and 100 groups (issue 28).

Issue 28 aims at each console page loading in under 300 ms on such a cluster. One cluster (API keys required, as
the console is run) is given, through /v1 and an admin key: 1,000 topics and 100 groups; a few messages in the first
topics; a group that has received some of one topic's messages, acked some and nacked some into its DLQ (max_retries
0), so it has a lag and dead letters; every other group has received from one topic (the groups page lists what
each consumes); a push subscription (to a closed port, on a topic with no message: nothing is pushed). Then each
page of gateway.console.routes.PAGES, asked for what the browser tests ask it for (a topic's detail, a group's lag,
a peek, a group's dead letters), is loaded in headless Chromium (bench.pageload): one warm-up load, then 5 timed
from the navigation's start until the page's data is drawn. The figure is each page's median; no reference system
is measured beside it (none serves this console), so each is set against the aim, 300 ms, as its reference.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.cluster import Cluster, api_key, petrel_cluster, request_json, until_admitted
from bench.figures import BenchOptions, Figure
from bench.loopback import free_port_run
from bench.pageload import ConsolePage, load_times

AIM_MS = 300.0
KEY_RATE = 1_000_000.0
SETUP_THREADS = 8
TOPIC_MESSAGES = 3
"""Messages sent to each of the first few topics."""
BUSY_MESSAGES = 20
"""Messages of the busy topic, of which the busy group receives half: acks a quarter, nacks a quarter to its DLQ."""
REFERENCE = f"none: issue 28's aim, {AIM_MS:.0f} ms"


@dataclass(frozen=True, slots=True)
class Sizes:
    topics: int
    groups: int
    loads: int
    warmups: int = 1


FULL = Sizes(topics=1_000, groups=100, loads=5)
QUICK = Sizes(topics=100, groups=10, loads=2)


def topic_name(n: int) -> str:
    return f"console-{n:04d}"


def group_name(n: int) -> str:
    return f"console-g{n:03d}"


BUSY_TOPIC = topic_name(0)
BUSY_GROUP = group_name(0)
PAGES = (
    ConsolePage("overview"),
    ConsolePage("topics", f"?topic={BUSY_TOPIC}"),
    ConsolePage("groups", f"?group={BUSY_GROUP}"),
    ConsolePage("messages", f"?peek={BUSY_TOPIC}"),
    ConsolePage("dlq", f"?group={BUSY_GROUP}"),
    ConsolePage("timers"),
    ConsolePage("transactions"),
    ConsolePage("push"),
    ConsolePage("keys"),
)


def console(options: BenchOptions) -> list[Figure]:
    return measure(QUICK if options.quick else FULL)


def measure(sizes: Sizes) -> list[Figure]:
    with petrel_cluster({"PETREL_AUTH": "required"}) as cluster:
        key = api_key(cluster, "console-bench", ["admin", "pub", "sub"], KEY_RATE)
        until_admitted("GET", f"{cluster.url}/v1/topics", None, key)
        populate(cluster, key, sizes)
        print(f"  console: {sizes.topics:,} topics, {sizes.groups:,} groups; loading {len(PAGES)} pages", flush=True)
        times = load_times(cluster.url, key, PAGES, sizes.loads, sizes.warmups)
    return figures(times, sizes)


def populate(cluster: Cluster, key: str, sizes: Sizes) -> None:
    """The topics, the groups, their messages, lag, dead letters and a push subscription."""

    def call(method: str, path: str, body: object = None) -> Any:
        return request_json(method, f"{cluster.url}{path}", body, key)

    def each(function: Any, items: range) -> None:
        with ThreadPoolExecutor(SETUP_THREADS) as pool:
            list(pool.map(function, items))

    each(lambda n: call("PUT", f"/v1/topics/{topic_name(n)}", {}), range(sizes.topics))
    each(
        lambda n: call("PUT", f"/v1/groups/{group_name(n)}", {"max_retries": 0} if n == 0 else {}), range(sizes.groups)
    )
    for n in range(BUSY_MESSAGES):
        call("POST", f"/v1/topics/{BUSY_TOPIC}/messages", {"body": f"busy {n}", "keys": [f"key-{n % 4}"]})
    each(lambda n: _send_some(call, topic_name(n)), range(1, min(10, sizes.topics)))
    received = _receive(call, BUSY_GROUP, BUSY_TOPIC, BUSY_MESSAGES // 2)
    handles = [m["receipt_handle"] for m in received]
    call("POST", f"/v1/groups/{BUSY_GROUP}/ack", {"receipt_handles": handles[: len(handles) // 2]})
    call("POST", f"/v1/groups/{BUSY_GROUP}/nack", {"receipt_handles": handles[len(handles) // 2 :]})
    each(lambda n: _receive(call, group_name(n), topic_name(n % sizes.topics), 0), range(1, sizes.groups))
    closed = f"http://127.0.0.1:{free_port_run(1)}/hook"
    call("PUT", f"/v1/groups/{group_name(1)}/subscriptions/{topic_name(sizes.topics - 1)}", {"endpoint_url": closed})


def _send_some(call: Any, topic: str) -> None:
    for n in range(TOPIC_MESSAGES):
        call("POST", f"/v1/topics/{topic}/messages", {"body": f"{topic} {n}"})


def _receive(call: Any, group: str, topic: str, count: int) -> list[dict[str, Any]]:
    """`count` messages of `topic` received by `group`; with 0, one receive that takes what there is, so the group
    has received from the topic (a group's subscriptions are the topics it has received from)."""
    got: list[dict[str, Any]] = []
    for _ in range(50):
        body = {"max_messages": max(1, min(32, count - len(got))), "wait_seconds": 1 if count else 0}
        got += call("POST", f"/v1/groups/{group}/topics/{topic}/receive", body)["messages"]
        if len(got) >= count:
            return got
    raise RuntimeError(f"{group} received {len(got)} of {topic}'s {count} messages")


def figures(times: dict[str, list[float]], sizes: Sizes) -> list[Figure]:
    medians = {label: statistics.median(values) for label, values in times.items()}
    on = f"{sizes.topics:,} topics, {sizes.groups:,} groups"
    for label, values in times.items():
        shown = ", ".join(f"{v:.0f}" for v in values)
        print(f"  console {label}: median {medians[label]:.0f} ms ({shown} ms; {on})", flush=True)
    slowest = max(medians, key=medians.__getitem__)
    per_page = [
        Figure(f"console load: {label.split('?')[0]}", ms, REFERENCE, AIM_MS, "ms", 1.0, higher_is_better=False)
        for label, ms in medians.items()
    ]
    worst_reference = f"{REFERENCE} (the {slowest} page)"
    worst = Figure("console load: slowest page", medians[slowest], worst_reference, AIM_MS, "ms", 1.0, False)
    return [*per_page, worst]
