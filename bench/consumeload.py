"""The consumer-group load process for the gateway: drain a backlog, or time send-to-receive under long polling.

Run as its own process (like bench.loadgen) so that its Python work is not the
bench process's, and each answer is checked. Its requests go through `Client`, the
gateway's own lean internal client, not aiohttp (bench/README.md: the latency load's
p99 fell from 5.0-6.3 to 3.6-4.7 ms with the same cluster):

`python -m bench.consumeload drain URL TOPIC GROUP --count N --warmup-messages W --consumers C --fill WHEN`
sends N numbered 1 KiB messages (batches of 256) before the consumers start or
while they run, and C consumers, each on its own keep-alive connection, loop:
receive up to 32 (`wait_seconds` 1, a lease longer than the run), ack them,
until all N are acked; it prints a bench.drain.Drain. With `--processes P` (a
backlog: `--fill before` or `no`) the consumers are spread over P processes
(bench.drain_processes), so that no one Python process limits the drain.

`python -m bench.consumeload latency URL TOPIC GROUP --rate R --warmup S --seconds S --consumers C`
sends one message per request, paced R a second (open loop: a send is issued
when it is due even if the one before has not been answered), while C consumers
wait in long polls. Each body carries its send's `time.perf_counter_ns()`; the
latency of a message is when the receive answer that holds it arrived minus
that. Acks go out in the background so a consumer is back in its poll at once.
It prints one JSON line of latencies (ms) of the messages sent after the warm-up.

`python -m bench.consumeload sends URL TOPIC - --rate R --warmup S --seconds S` makes the
same paced sends and nothing else, and prints the same JSON line with each measured send's
round trip: pointed at the FastAPI no-op, it is what this load generator adds to any latency
it measures (its own pacing, its event loop, the machine), measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections.abc import Coroutine
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from bench.drain import BODY_BYTES, Drain, Progress, body_of, index_of, print_drain, run_consumers
from bench.drain_processes import drain_in_processes
from libs.http.lean_transport import LeanTransport
from libs.http.transport import Call, TransportError

FILL_BATCH = 256
FILL_SENDERS = 8
RECEIVE_MAX = 32
DRAIN_WAIT_S = 1
LEASE_S = 120
DRAIN_LIMIT_S = 120.0
FILLING = ("before", "during", "no")
POLL_WAIT_S = 5
GRACE_S = 3.0
"""After the last send, how long the latency run waits for what is still on its way."""
JSON_HEADERS = {"content-type": "application/json"}
SEND_CONNECTIONS = 64
CONNECT_S = 5.0
CALL_S = 60.0
"""Any call's limit: longer than a poll's wait (POLL_WAIT_S)."""


class Client:
    """POSTs on pooled keep-alive connections, by the gateway's own internal client (libs.http.lean_transport).

    One write a request and httptools parsing the answer: about a third of aiohttp's CPU a request
    (which cost about as much as the gateway's own work on a send), so that on the 2 cores the
    load process takes less from the processes it measures. `waiting`: a pool for long polls,
    which may hold their connection (as many connections as there are polls).
    """

    def __init__(self, connections: int, *, waiting: bool = False) -> None:
        self.transport = LeanTransport(connect_timeout=CONNECT_S, timeout=CALL_S, max_connections=connections)
        self.waiting = waiting

    async def __aenter__(self) -> Client:
        await self.transport.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.transport.close()

    async def post(self, url: str, body: bytes) -> tuple[int, bytes]:
        """(status, body) of the answer; a libs.http.transport.TransportError when none came."""
        answer = await self.transport.send(Call("POST", url, body, JSON_HEADERS, waiting=self.waiting))
        return answer.status, answer.body


async def fill(client: Client, url: str, topic: str, count: int) -> None:
    """Send messages 0..count-1 in batches; a failed send fails the run (the backlog must be whole)."""
    endpoint = f"{url}/v1/topics/{topic}/messages:batch"
    starts = iter(range(0, count, FILL_BATCH))

    async def sender() -> None:
        for first in starts:
            batch = [{"body": body_of(i)} for i in range(first, min(first + FILL_BATCH, count))]
            status, text = await client.post(endpoint, orjson.dumps({"messages": batch}))
            if status >= 300 or b'"error":{' in text:
                raise RuntimeError(f"filling {topic}: {status} {text[:300]!r}")

    await asyncio.gather(*(sender() for _ in range(FILL_SENDERS)))


class Consumer:
    """One consumer's requests: receive and ack on one group's topic."""

    def __init__(self, client: Client, url: str, group: str, topic: str) -> None:
        self.client = client
        self.receive_url = f"{url}/v1/groups/{group}/topics/{topic}/receive"
        self.ack_url = f"{url}/v1/groups/{group}/ack"

    async def receive(self, wait_seconds: float) -> tuple[int, list[dict[str, Any]]]:
        """(when the answer arrived, in perf_counter_ns; its messages)."""
        body = {"max_messages": RECEIVE_MAX, "wait_seconds": wait_seconds, "invisible_seconds": LEASE_S}
        try:
            status, text = await self.client.post(self.receive_url, orjson.dumps(body))
        except TransportError as exc:
            raise RuntimeError(f"receive: {exc!r}") from exc
        arrived = time.perf_counter_ns()
        if status != 200:
            raise RuntimeError(f"receive: {status} {text[:300]!r}")
        messages: list[dict[str, Any]] = orjson.loads(text)["messages"]
        return arrived, messages

    async def ack(self, handles: list[str]) -> list[str]:
        """What went wrong, one entry per failed handle."""
        body = orjson.dumps({"receipt_handles": handles})
        try:
            status, text = await self.client.post(self.ack_url, body)
        except TransportError as exc:
            return [f"ack: {exc!r}"] * len(handles)
        if status != 200:
            return [f"ack: {status} {text[:300]!r}"] * len(handles)
        return [repr(r["error"]) for r in orjson.loads(text)["results"] if not r["ok"]]


async def drain(url: str, topic: str, group: str, count: int, warmup: int, consumers: int, filling: str) -> Drain:
    """`filling`: "before" (a backlog), "during" (sent while the consumers run) or "no" (already there)."""
    result = Drain(count=count, consumers=consumers)
    progress = Progress(result, warmup)
    async with Client(consumers + FILL_SENDERS) as client:
        if filling == "before":
            await fill(client, url, topic, count)
        consuming = asyncio.create_task(consume(Consumer(client, url, group, topic), progress, consumers))
        if filling == "during":
            await fill(client, url, topic, count)
        await consuming
    return result


async def consume(consumer: Consumer, progress: Progress, consumers: int) -> None:
    """`consumers` loops of receive up to 32, ack them, until `progress` says the drain is done."""
    result = progress.drain

    async def one(_: int) -> None:
        while True:
            try:
                _, messages = await consumer.receive(DRAIN_WAIT_S)
            except RuntimeError as exc:
                result.error(str(exc))
                continue
            fresh = progress.delivered([index_of(m["body"]) for m in messages])
            result.redelivered += sum(1 for m in messages if m["delivery_attempt"] > 1)
            if messages:
                failed = await consumer.ack([m["receipt_handle"] for m in messages])
                for what in failed:
                    result.error(what)
                progress.acked(fresh - len(failed))

    await run_consumers(consumers, one, progress, DRAIN_LIMIT_S)


def drain_by_processes(
    url: str, topic: str, group: str, count: int, warmup: int, consumers: int, processes: int
) -> Drain:
    """A backlog already there, drained by `consumers` spread over `processes` processes."""

    async def work(progress: Progress, share: int) -> None:
        async with Client(share) as client:
            await consume(Consumer(client, url, group, topic), progress, share)

    return drain_in_processes(count, warmup, consumers, processes, work)


async def _fill_only(url: str, topic: str, count: int) -> None:
    async with Client(FILL_SENDERS) as client:
        await fill(client, url, topic, count)


@dataclass(slots=True)
class Latencies:
    rate: float
    consumers: int
    sent: int = 0
    received: int = 0
    lost: int = 0
    """Measured messages that had not arrived GRACE_S after the last send."""
    duplicates: int = 0
    errors: int = 0
    first_error: str | None = None
    ms: list[float] = field(default_factory=list)
    """Every measured message's send-to-receive latency, in ms."""

    def error(self, what: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or what[:300]


def latency_body(sequence: int, sent_ns: int) -> str:
    head = f"{sequence:016d}:{sent_ns:020d}:"
    return head + "x" * (BODY_BYTES - len(head))


def parse_latency_body(body: str) -> tuple[int, int]:
    """(sequence, sent_ns) of a `latency_body`."""
    sequence, sent_ns, _ = body.split(":", 2)
    return int(sequence), int(sent_ns)


class LatencyRun:
    """Paced sends and long-polling consumers in one process, timed on one clock (perf_counter_ns)."""

    def __init__(self, url: str, topic: str, rate: float, warmup: float, seconds: float, consumers: int) -> None:
        self.url, self.topic, self.rate = url, topic, rate
        self.result = Latencies(rate=rate, consumers=consumers)
        self.measured = range(int(warmup * rate), int((warmup + seconds) * rate))
        self.arrived: dict[int, float] = {}
        self.round_trips: dict[int, float] = {}
        """sequence -> ms from a send's start to its answer (the `sends` kind reports these)"""
        self.all_arrived = asyncio.Event()
        self.background: set[asyncio.Task[None]] = set()

    async def run(self, group: str) -> Latencies:
        consumers = self.result.consumers
        # One pool for the polls, one for sends and acks, so a send never queues behind a held poll.
        async with Client(consumers, waiting=True) as polls, Client(SEND_CONNECTIONS) as sends:
            poller, acker = Consumer(polls, self.url, group, self.topic), Consumer(sends, self.url, group, self.topic)
            tasks = [asyncio.create_task(self._consume(poller, acker)) for _ in range(consumers)]
            await asyncio.sleep(0.5)  # the consumers are in their polls before the first send
            await self._paced(sends)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.all_arrived.wait(), GRACE_S)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, *self.background, return_exceptions=True)
        return self._measured(self.arrived)

    async def round_trips_only(self) -> Latencies:
        """The paced sends alone: each measured send's round trip."""
        async with Client(SEND_CONNECTIONS) as sends:
            await self._paced(sends)
            await asyncio.gather(*self.background, return_exceptions=True)
        return self._measured(self.round_trips)

    def _measured(self, times: dict[int, float]) -> Latencies:
        """The result: the times (ms) of the measured sequence numbers; those without one are lost."""
        result = self.result
        result.sent = len(self.measured)
        result.ms = [times[s] for s in self.measured if s in times]
        result.received = len(result.ms)
        result.lost = result.sent - result.received
        return result

    async def _consume(self, poller: Consumer, acker: Consumer) -> None:
        while True:
            try:
                now, messages = await poller.receive(POLL_WAIT_S)
            except RuntimeError as exc:
                self.result.error(str(exc))
                continue
            for m in messages:
                self.arrive(m["body"], now)
            if messages:
                self._in_background(self._ack(acker, [m["receipt_handle"] for m in messages]))

    def arrive(self, body: str, now: int) -> None:
        """A message with a `latency_body` arrived at `now` (perf_counter_ns); bench.pushload's receiver calls it."""
        sequence, sent_ns = parse_latency_body(body)
        if sequence in self.arrived:
            self.result.duplicates += 1
        self.arrived[sequence] = (now - sent_ns) / 1e6
        if sequence in self.measured and len(self.arrived) >= self.measured.stop:
            self.all_arrived.set()

    async def _ack(self, acker: Consumer, handles: list[str]) -> None:
        for what in await acker.ack(handles):
            self.result.error(what)

    async def _send(self, client: Client, sequence: int) -> None:
        sent_ns = time.perf_counter_ns()
        body = orjson.dumps({"body": latency_body(sequence, sent_ns), "tag": "latency"})
        try:
            status, text = await client.post(f"{self.url}/v1/topics/{self.topic}/messages", body)
        except TransportError as exc:
            self.result.error(f"send: {exc!r}")
            return
        if status >= 300:
            self.result.error(f"send: {status} {text[:300]!r}")
            return
        self.round_trips[sequence] = (time.perf_counter_ns() - sent_ns) / 1e6

    async def _paced(self, client: Client) -> None:
        """Issue send 0, 1, 2, ... each when it is due at `rate` a second, whether or not the last was answered."""
        interval_ns = 1e9 / self.rate
        started = time.perf_counter_ns()
        end = self.measured.stop
        sequence = 0
        while sequence < end:
            due = min(end, int((time.perf_counter_ns() - started) / interval_ns) + 1)
            while sequence < due:
                self._in_background(self._send(client, sequence))
                sequence += 1
            await asyncio.sleep(max(0.0, (started + sequence * interval_ns - time.perf_counter_ns()) / 1e9))

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.consumeload")
    parser.add_argument("kind", choices=("drain", "latency", "sends"))
    parser.add_argument("url")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--consumers", type=int, default=8)
    parser.add_argument("--count", type=int, default=0, help="drain: messages in the backlog")
    parser.add_argument("--warmup-messages", type=int, default=0, help="drain: not timed until this many are acked")
    parser.add_argument(
        "--fill", choices=FILLING, default="no", help="drain: send the messages before the consumers start, or during"
    )
    parser.add_argument(
        "--processes", type=int, default=1, help="drain: spread the consumers over this many processes (a backlog)"
    )
    parser.add_argument("--rate", type=float, default=1000.0, help="latency: sends a second")
    parser.add_argument("--warmup", type=float, default=2.0, help="latency: seconds not measured")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency: seconds measured")
    args = parser.parse_args(argv)
    import uvloop

    if args.kind == "drain" and args.processes > 1:
        if args.fill == "during":
            parser.error("--processes over 1 drains a backlog: --fill before or no")
        if args.fill == "before":
            uvloop.run(_fill_only(args.url, args.topic, args.count))
        print_drain(
            drain_by_processes(
                args.url, args.topic, args.group, args.count, args.warmup_messages, args.consumers, args.processes
            )
        )
        return
    if args.kind == "drain":
        print_drain(
            uvloop.run(
                drain(args.url, args.topic, args.group, args.count, args.warmup_messages, args.consumers, args.fill)
            )
        )
        return
    run = LatencyRun(args.url, args.topic, args.rate, args.warmup, args.seconds, args.consumers)
    measured = run.round_trips_only() if args.kind == "sends" else run.run(args.group)
    print(json.dumps(asdict(uvloop.run(measured))), flush=True)


if __name__ == "__main__":
    main()
