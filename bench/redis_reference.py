"""The Redis Streams references: XADD of 1 KiB entries, and a consumer group draining them.

`python -m bench.redis_reference URL WARMUP SECONDS` runs the send load (in
its own process, like bench.loadgen: 32 clients, XADD pipelined 32 at a time)
against a stream key of its own, deletes that key, and prints the tally as one
JSON line. `python -m bench.redis_reference URL --drain COUNT --warmup-messages W
--consumers C` fills a stream with COUNT numbered 1 KiB entries, then C clients
of one group each loop `XREADGROUP COUNT 32` + `XACK` until all are acked, and
prints a bench.drain.Drain (`--processes P`: the clients spread over P processes,
as bench.consumeload spreads Petrel's consumers). `private_redis` runs a redis-server that fsyncs
every write (`appendfsync always`), the reference for SYNC_FLUSH.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from bench.drain import Drain, Progress, body_of, index_of, print_drain, run_consumers
from bench.drain_processes import drain_in_processes
from bench.loadgen import BATCH, CONNECTIONS, TEXT_BODY, Tally
from bench.loopback import free_port, wait_for_port

REDIS_SERVER = "/usr/bin/redis-server"
FILL_PIPELINE = 256
DRAIN_BLOCK_MS = 1000
DRAIN_LIMIT_S = 120.0
GROUP = "petrel-bench"


async def drive(url: str, warmup: float, seconds: float) -> Tally:
    import redis.asyncio as redis

    key = f"petrel-bench-{uuid.uuid4().hex}"
    fields = {"body": TEXT_BODY}
    tally = Tally(messages_per_request=BATCH)
    clients = [redis.Redis.from_url(url) for _ in range(CONNECTIONS)]
    idle = list(clients)

    async def one_request() -> str | None:
        client = idle.pop()
        try:
            async with client.pipeline(transaction=False) as pipe:
                for _ in range(BATCH):
                    pipe.xadd(key, fields)
                await pipe.execute()
        finally:
            idle.append(client)
        return None

    try:
        await tally.measure(one_request, CONNECTIONS, warmup, seconds)
    finally:
        await clients[0].delete(key)
        for client in clients:
            await client.aclose()
    return tally


async def drain(url: str, count: int, warmup: int, consumers: int) -> Drain:
    """Fill a stream with `count` entries, then consume them with `consumers` clients of one group."""
    key = f"petrel-bench-{uuid.uuid4().hex}"
    result = Drain(count=count, consumers=consumers)
    try:
        await _prepare(url, key, count)
        await _consume(url, key, Progress(result, warmup), consumers)
    finally:
        await _delete(url, key)
    return result


def drain_by_processes(url: str, count: int, warmup: int, consumers: int, processes: int) -> Drain:
    """`drain`, its clients spread over `processes` processes (bench.drain_processes)."""
    import uvloop

    key = f"petrel-bench-{uuid.uuid4().hex}"
    try:
        uvloop.run(_prepare(url, key, count))
        return drain_in_processes(
            count, warmup, consumers, processes, lambda progress, share: _consume(url, key, progress, share)
        )
    finally:
        uvloop.run(_delete(url, key))


async def _prepare(url: str, key: str, count: int) -> None:
    """The stream `key` with `count` numbered entries, and the group that drains it."""
    import redis.asyncio as redis

    client = redis.Redis.from_url(url)
    try:
        await _fill(client, key, count)
        await client.xgroup_create(key, GROUP, id="0")
    finally:
        await client.aclose()


async def _delete(url: str, key: str) -> None:
    import redis.asyncio as redis

    client = redis.Redis.from_url(url)
    try:
        await client.delete(key)
    finally:
        await client.aclose()


async def _consume(url: str, key: str, progress: Progress, consumers: int) -> None:
    """`consumers` clients of the group loop XREADGROUP COUNT 32 + XACK until `progress` says the drain is done."""
    import redis.asyncio as redis

    result = progress.drain
    clients = [redis.Redis.from_url(url) for _ in range(consumers)]

    async def consume(n: int) -> None:
        client, name = clients[n], f"consumer-{os.getpid()}-{n}"
        while True:
            answer = await client.xreadgroup(GROUP, name, {key: ">"}, count=BATCH, block=DRAIN_BLOCK_MS)
            entries = answer[0][1] if answer else []
            fresh = progress.delivered([index_of(fields[b"body"]) for _, fields in entries])
            if entries:
                acked = await client.xack(key, GROUP, *(entry_id for entry_id, _ in entries))
                if acked != len(entries):
                    result.error(f"XACK acked {acked} of {len(entries)}")
                progress.acked(fresh)

    try:
        await run_consumers(consumers, consume, progress, DRAIN_LIMIT_S)
    finally:
        for client in clients:
            await client.aclose()


async def _fill(client: Any, key: str, count: int) -> None:
    for first in range(0, count, FILL_PIPELINE):
        async with client.pipeline(transaction=False) as pipe:
            for index in range(first, min(first + FILL_PIPELINE, count)):
                pipe.xadd(key, {"body": body_of(index)})
            await pipe.execute()


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server on a free port that appends every write to its AOF and fsyncs it; its URL."""
    port = free_port()
    directory = tempfile.mkdtemp(prefix="petrel-bench-redis-")
    command = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    command += ["--appendonly", "yes", "--appendfsync", "always", "--dir", directory]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, alive=proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_reference")
    parser.add_argument("url")
    parser.add_argument("warmup", type=float, nargs="?", help="send load: seconds of warm-up")
    parser.add_argument("seconds", type=float, nargs="?", help="send load: seconds measured")
    parser.add_argument("--drain", type=int, metavar="COUNT", help="fill COUNT entries, then consume them")
    parser.add_argument("--warmup-messages", type=int, default=0, help="drain: not timed until this many are acked")
    parser.add_argument("--consumers", type=int, default=8, help="drain: clients of the consumer group")
    parser.add_argument("--processes", type=int, default=1, help="drain: spread the clients over this many processes")
    args = parser.parse_args(argv)
    import uvloop

    if args.drain is not None and args.processes > 1:
        print_drain(drain_by_processes(args.url, args.drain, args.warmup_messages, args.consumers, args.processes))
        return
    if args.drain is not None:
        print_drain(uvloop.run(drain(args.url, args.drain, args.warmup_messages, args.consumers)))
        return
    if args.warmup is None or args.seconds is None:
        parser.error("the send load needs WARMUP and SECONDS")
    tally = uvloop.run(drive(args.url, args.warmup, args.seconds))
    print(json.dumps(asdict(tally)), file=sys.stdout, flush=True)


if __name__ == "__main__":
    main()
