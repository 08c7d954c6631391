"""The HTTP load generator, run as its own process so that client and server share the cores fairly.

`python -m bench.loadgen URL single|batch WARMUP SECONDS` POSTs the same JSON
body over 32 keep-alive aiohttp connections: warms up, then counts the
answers of the measured window and prints them as one JSON line. Every answer
is checked: a non-2xx status, or a batch entry that carries an error, counts
as an error, and the first one is printed. With BENCH_API_KEY set, every
request carries it as `Authorization: Bearer <key>` (in the environment, not
the command line, where `ps` would show it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import orjson

CONNECTIONS = 32
BATCH = 32
TEXT_BODY = "x" * 1024


DELAY_MS = 3_600_000
KINDS = ("single", "batch", "delayed", "transaction")
"""single: one message a request; batch: 32; delayed: 32, each scheduled an hour ahead;
transaction: one half message (producer group `bench`) to /v1/topics/T/transactions, then its commit
(two requests per message, counted as one)."""
PRODUCER_GROUP = "bench"
API_KEY_ENV = "BENCH_API_KEY"
JSON_BODY = {"content-type": "application/json"}


def auth_headers(api_key: str | None = None) -> dict[str, str]:
    """What every bench request carries to be let in: the API key as a bearer token, or nothing (auth off)."""
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


def payload(kind: str) -> tuple[bytes, int]:
    """The request body and how many messages it carries."""
    if kind == "single":
        return orjson.dumps({"body": TEXT_BODY, "tag": "t"}), 1
    if kind == "transaction":
        return orjson.dumps({"body": TEXT_BODY, "tag": "t", "producer_group": PRODUCER_GROUP}), 1
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
        """Run `workers` loops of `one_request` (it answers what went wrong, or None); count the window only.

        The window lasts `seconds` and, on a machine too slow to answer within it, until the first answer
        (a rate of zero answers says nothing about the endpoint).
        """
        counting = stop = False
        answered = asyncio.Event()

        async def worker() -> None:
            while not stop:
                error = await one_request()
                if counting:
                    self.requests += 1
                    answered.set()
                    if error is not None:
                        self.errors += 1
                        self.first_error = self.first_error or error

        running = [asyncio.create_task(worker()) for _ in range(workers)]
        await asyncio.sleep(warmup)
        counting = True
        started = time.perf_counter()
        await asyncio.sleep(seconds)
        if not answered.is_set():
            first = asyncio.ensure_future(answered.wait())
            await asyncio.wait([first, *running], return_when=asyncio.FIRST_COMPLETED)
            first.cancel()
        counting = False
        self.seconds = time.perf_counter() - started
        stop = True
        await asyncio.gather(*running)

    @property
    def succeeded_per_second(self) -> float:
        """Messages a second of the answers that were not errors."""
        good = self.requests - self.errors
        return good * self.messages_per_request / self.seconds if self.seconds else 0.0


async def drive(url: str, kind: str, warmup: float, seconds: float, api_key: str | None = None) -> Tally:
    import aiohttp

    body, per_request = payload(kind)
    tally = Tally(messages_per_request=per_request)
    headers = JSON_BODY | auth_headers(api_key)
    connector = aiohttp.TCPConnector(limit=CONNECTIONS, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one_request() -> str | None:
            async with session.post(url, data=body, headers=headers) as response:
                answer = await response.read()
                if response.status >= 300 or b'"error":{' in answer:
                    return f"{response.status} {answer[:300]!r}"
            if kind == "transaction":
                return await commit(session, url, answer, auth_headers(api_key))
            return None

        await tally.measure(one_request, CONNECTIONS, warmup, seconds)
    return tally


async def commit(session: Any, transactions_url: str, half_answer: bytes, headers: dict[str, str]) -> str | None:
    """Commit the transaction a half message's answer names; what went wrong, or None."""
    base = transactions_url.split("/v1/", 1)[0]
    transaction_id = orjson.loads(half_answer)["transaction_id"]
    async with session.post(f"{base}/v1/transactions/{transaction_id}/commit", headers=headers) as response:
        answer = await response.read()
        if response.status != 200:
            return f"commit: {response.status} {answer[:300]!r}"
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen")
    parser.add_argument("url")
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("warmup", type=float)
    parser.add_argument("seconds", type=float)
    args = parser.parse_args(argv)
    import uvloop

    tally = uvloop.run(drive(args.url, args.kind, args.warmup, args.seconds, os.environ.get(API_KEY_ENV)))
    print(json.dumps(asdict(tally)), file=sys.stdout, flush=True)


if __name__ == "__main__":
    main()
