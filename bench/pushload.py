"""The push load process for `petrel bench push`: a receiver that acks at once, and what it counts.

Run as its own process (as bench.consumeload is for the gateway's consumers), so the
receiver's Python work competes for the cores as a real endpoint's would. The receiver
is a raw ASGI app under uvicorn (httptools, on this process's uvloop): it reads each
POST, takes the message out of the Standard Webhooks JSON, answers 204 at once (any
2xx acks) and only counts. It verifies no signature and dedupes nothing by webhook-id:
that is a receiver's cost, not Petrel's.

`python -m bench.pushload drain URL TOPIC GROUP --count N --warmup-messages W --max-in-flight M`
sends N numbered 1 KiB messages (bench.consumeload.fill), then subscribes the receiver
(`PUT /v1/groups/GROUP/subscriptions/TOPIC`) and counts deliveries with a
bench.drain.Progress until all N came. The window runs from the end of the warm-up share
to the group's lag 0 (the push service's last ack landed: polled every LAG_POLL_S after the
last delivery), as a consumer's drain runs to its last ack answered. It deletes the
subscription and prints a bench.drain.Drain (`receives` counts POSTs).

`python -m bench.pushload latency URL TOPIC GROUP --rate R --warmup S --seconds S --max-in-flight M`
subscribes the receiver, then sends as bench.consumeload's latency run does (paced open
loop, one message a send, the send's perf_counter_ns in the body) with no consumers: the
receiver takes their place, so a message's latency is when its POST arrived minus its
send, on one clock. Prints the same JSON line of bench.consumeload.Latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from typing import Any

import orjson

from bench.consumeload import FILL_SENDERS, JSON_HEADERS, Client, LatencyRun, fill
from bench.drain import Drain, Progress, index_of, print_drain

LAG_POLL_S = 0.01
LAG_LIMIT_S = 30.0

Delivered = Callable[[dict[str, Any], int], None]
"""Called with a delivery's `data` (the message) and when its POST had arrived, in perf_counter_ns."""

_NO_CONTENT = {"type": "http.response.start", "status": 204, "headers": [(b"content-length", b"0")]}
_EMPTY = {"type": "http.response.body", "body": b""}


class Receiver:
    """The ASGI app: every POST is read, handed to `delivered`, and answered 204."""

    def __init__(self, delivered: Delivered, failed: Callable[[str], None]) -> None:
        self.delivered = delivered
        self.failed = failed

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            event = await receive()
            chunks.append(event.get("body", b""))
            if not event.get("more_body"):
                break
        arrived = time.perf_counter_ns()
        try:
            self.delivered(orjson.loads(b"".join(chunks))["data"], arrived)
        except (ValueError, KeyError, TypeError) as exc:
            # Still a 2xx: a payload the bench cannot read is reported, not redelivered forever.
            self.failed(f"unreadable delivery: {exc!r}")
        await send(_NO_CONTENT)
        await send(_EMPTY)


@contextlib.asynccontextmanager
async def receiving(receiver: Receiver) -> AsyncIterator[str]:
    """Serve `receiver` on a loopback port of its own; yield its URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        receiver, http="httptools", loop="none", lifespan="off", log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            serving.result()
            raise RuntimeError("the receiver stopped before it started")
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        await serving
        sock.close()


class Subscription:
    """The receiver's push subscription to GROUP's messages of TOPIC, through the gateway."""

    def __init__(self, session: Any, url: str, group: str, topic: str) -> None:
        self.session = session
        self.url = f"{url}/v1/groups/{group}/subscriptions/{topic}"
        self.lag_url = f"{url}/v1/groups/{group}/lag"

    async def put(self, endpoint: str, max_in_flight: int) -> None:
        body = orjson.dumps({"endpoint_url": endpoint, "max_in_flight": max_in_flight})
        async with self.session.put(self.url, data=body, headers=JSON_HEADERS) as answer:
            if answer.status not in (200, 201):
                raise RuntimeError(f"subscribing: {answer.status} {(await answer.read())[:300]!r}")

    async def delete(self) -> None:
        async with self.session.delete(self.url) as answer:
            if answer.status >= 300 and answer.status != 404:
                raise RuntimeError(f"unsubscribing: {answer.status} {(await answer.read())[:300]!r}")

    async def settled(self, limit: float) -> float:
        """Seconds until the group's lag is 0 (every delivery acked at its broker); `limit` if never."""
        started = time.perf_counter()
        while time.perf_counter() - started < limit:
            async with self.session.get(self.lag_url) as answer:
                if answer.status == 200 and orjson.loads(await answer.read())["total_lag"] == 0:
                    return time.perf_counter() - started
            await asyncio.sleep(LAG_POLL_S)
        return limit


async def drain(url: str, topic: str, group: str, count: int, warmup: int, max_in_flight: int, limit: float) -> Drain:
    import aiohttp

    result = Drain(count=count, consumers=max_in_flight)
    progress = Progress(result, warmup)

    def delivered(message: dict[str, Any], _: int) -> None:
        if message["delivery_attempt"] > 1:
            result.redelivered += 1
        progress.acked(progress.delivered([index_of(message["body"])]))

    async with aiohttp.ClientSession() as session:
        async with Client(FILL_SENDERS) as client:
            await fill(client, url, topic, count)
        subscription = Subscription(session, url, group, topic)
        async with receiving(Receiver(delivered, result.error)) as endpoint:
            await subscription.put(endpoint, max_in_flight)
            await progress.wait(limit)
            settle = await subscription.settled(LAG_LIMIT_S)
            if settle >= LAG_LIMIT_S:
                result.error(f"the group's lag was not 0 {LAG_LIMIT_S:.0f} s after the last delivery")
            result.seconds += settle
            await subscription.delete()
    return result


async def latency(
    url: str, topic: str, group: str, rate: float, warmup: float, seconds: float, max_in_flight: int
) -> dict[str, Any]:
    import aiohttp

    run = LatencyRun(url, topic, rate, warmup, seconds, consumers=0)

    def delivered(message: dict[str, Any], arrived: int) -> None:
        run.arrive(message["body"], arrived)

    async with aiohttp.ClientSession() as session:
        subscription = Subscription(session, url, group, topic)
        async with receiving(Receiver(delivered, run.result.error)) as endpoint:
            await subscription.put(endpoint, max_in_flight)
            measured = await run.run(group)
            await subscription.delete()
    return asdict(measured)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pushload")
    parser.add_argument("kind", choices=("drain", "latency"))
    parser.add_argument("url")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--count", type=int, default=0, help="drain: messages in the backlog")
    parser.add_argument("--warmup-messages", type=int, default=0, help="drain: not timed until this many came")
    parser.add_argument("--limit", type=float, default=120.0, help="drain: seconds before giving up")
    parser.add_argument("--rate", type=float, default=1000.0, help="latency: sends a second")
    parser.add_argument("--warmup", type=float, default=2.0, help="latency: seconds not measured")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency: seconds measured")
    args = parser.parse_args(argv)
    import uvloop

    if args.kind == "drain":
        counts = (args.count, args.warmup_messages, args.max_in_flight, args.limit)
        print_drain(uvloop.run(drain(args.url, args.topic, args.group, *counts)))
        return
    measured = latency(args.url, args.topic, args.group, args.rate, args.warmup, args.seconds, args.max_in_flight)
    print(json.dumps(uvloop.run(measured)), flush=True)


if __name__ == "__main__":
    main()
