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

    @property
    def messages_per_second(self) -> float:
        return self.requests * self.messages_per_request / self.seconds if self.seconds else 0.0


async def drive(url: str, kind: str, warmup: float, seconds: float) -> Tally:
    import aiohttp

    body, per_request = payload(kind)
    tally = Tally(messages_per_request=per_request)
    counting = False
    stop = False
    headers = {"content-type": "application/json"}
    connector = aiohttp.TCPConnector(limit=CONNECTIONS, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while not stop:
                async with session.post(url, data=body, headers=headers) as response:
                    answer = await response.read()
                    failed = response.status >= 300 or b'"error":{' in answer
                if counting:
                    tally.requests += 1
                    if failed:
                        tally.errors += 1
                        tally.first_error = tally.first_error or f"{response.status} {answer[:300]!r}"

        workers = [asyncio.create_task(worker()) for _ in range(CONNECTIONS)]
        await asyncio.sleep(warmup)
        counting = True
        started = time.perf_counter()
        await asyncio.sleep(seconds)
        counting = False
        tally.seconds = time.perf_counter() - started
        stop = True
        await asyncio.gather(*workers)
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
