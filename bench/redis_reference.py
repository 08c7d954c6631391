"""The Redis Streams reference: XADD of 1 KiB entries, pipelined 32 at a time by 32 clients.

`python -m bench.redis_reference URL WARMUP SECONDS` runs the load (in its own
process, like bench.loadgen) against a stream key of its own, deletes that key,
and prints the tally as one JSON line. `private_redis` runs a redis-server
that fsyncs every write (`appendfsync always`), the reference for SYNC_FLUSH.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import asdict

from bench.loadgen import BATCH, CONNECTIONS, TEXT_BODY, Tally
from bench.loopback import free_port, wait_for_port

REDIS_SERVER = "/usr/bin/redis-server"


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
    parser.add_argument("warmup", type=float)
    parser.add_argument("seconds", type=float)
    args = parser.parse_args(argv)
    import uvloop

    tally = uvloop.run(drive(args.url, args.warmup, args.seconds))
    print(json.dumps(asdict(tally)), file=sys.stdout, flush=True)


if __name__ == "__main__":
    main()
