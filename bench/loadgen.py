"""The HTTP load generator, run as its own process so that client and server share the cores fairly.

`python -m bench.loadgen URL single|batch WARMUP SECONDS` POSTs the same JSON
body over 32 keep-alive aiohttp connections: warms up, then counts the
answers of the measured window and prints them as one JSON line. Every answer
is checked: a non-2xx status, or a batch entry that carries an error, counts
as an error, and the first one is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

import orjson

CONNECTIONS = 32
BATCH = 32
TEXT_BODY = "x" * 1024


DELAY_MS = 3_600_000
KINDS = ("single", "batch", "delayed")
"""single: one message a request; batch: 32; delayed: 32, each scheduled an hour ahead."""


def payload(kind: str) -> tuple[bytes, int]:
    """The request body and how many messages it carries."""
    if kind == "single":
        return orjson.dumps({"body": TEXT_BODY, "tag": "t"}), 1
    extra = {"delay_ms": DELAY_MS} if kind == "delayed" else {}
    return orjson.dumps({"messages": [{"body": TEXT_BODY} | extra for _ in range(BATCH)]}), BATCH


@dataclass(slots=True)
class Tally:
    requests: int = 0
    errors: int = 0
    first_error: str | None = None
    seconds: float = 0.0
    messages_per_request: int = 1

    async def measure(
        self, one_request: Callable[[], Awaitable[str | None]], workers: int, warmup: float, seconds: float
    ) -> None:
        """Run `workers` loops of `one_request` (it answers what went wrong, or None); count the window only."""
        counting = stop = False

        async def worker() -> None:
            while not stop:
                error = await one_request()
                if counting:
                    self.requests += 1
                    if error is not None:
                        self.errors += 1
                        self.first_error = self.first_error or error

        running = [asyncio.create_task(worker()) for _ in range(workers)]
        await asyncio.sleep(warmup)
        counting = True
        started = time.perf_counter()
        await asyncio.sleep(seconds)
        counting = False
        self.seconds = time.perf_counter() - started
        stop = True
        await asyncio.gather(*running)

    @property
    def messages_per_second(self) -> float:
        return self.requests * self.messages_per_request / self.seconds if self.seconds else 0.0


async def drive(url: str, kind: str, warmup: float, seconds: float) -> Tally:
    import aiohttp

    body, per_request = payload(kind)
    tally = Tally(messages_per_request=per_request)
    headers = {"content-type": "application/json"}
    connector = aiohttp.TCPConnector(limit=CONNECTIONS, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one_request() -> str | None:
            async with session.post(url, data=body, headers=headers) as response:
                answer = await response.read()
                if response.status >= 300 or b'"error":{' in answer:
                    return f"{response.status} {answer[:300]!r}"
            return None

        await tally.measure(one_request, CONNECTIONS, warmup, seconds)
    return tally


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen")
    parser.add_argument("url")
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("warmup", type=float)
    parser.add_argument("seconds", type=float)
    args = parser.parse_args(argv)
    import uvloop

    tally = uvloop.run(drive(args.url, args.kind, args.warmup, args.seconds))
    print(json.dumps(asdict(tally)), file=sys.stdout, flush=True)


if __name__ == "__main__":
    main()
