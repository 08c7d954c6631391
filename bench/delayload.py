"""Batches of 32 1 KiB messages, with or without `delay_ms`, as a load process of its own.

`python -m bench.delayload URL delayed|plain WARMUP SECONDS`: the same driver as
bench.loadgen (32 keep-alive aiohttp connections, every answer checked), whose
batch body carries `delay_ms: 3600000` on every message for `delayed`. Prints
one JSON line, a bench.loadgen Tally.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict

import orjson

from bench.loadgen import BATCH, CONNECTIONS, TEXT_BODY, Tally

DELAY_MS = 3_600_000


def payload(kind: str) -> bytes:
    extra = {"delay_ms": DELAY_MS} if kind == "delayed" else {}
    return orjson.dumps({"messages": [{"body": TEXT_BODY} | extra for _ in range(BATCH)]})


async def drive(url: str, kind: str, warmup: float, seconds: float) -> Tally:
    import aiohttp

    body = payload(kind)
    tally = Tally(messages_per_request=BATCH)
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
    parser = argparse.ArgumentParser(prog="python -m bench.delayload")
    parser.add_argument("url")
    parser.add_argument("kind", choices=["delayed", "plain"])
    parser.add_argument("warmup", type=float)
    parser.add_argument("seconds", type=float)
    args = parser.parse_args(argv)
    import uvloop

    tally = uvloop.run(drive(args.url, args.kind, args.warmup, args.seconds))
    print(json.dumps(asdict(tally)), file=sys.stdout, flush=True)


if __name__ == "__main__":
    main()
