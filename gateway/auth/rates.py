"""RateLimiter: each API key's calls per second, counted across the cluster's gateways in Redis.

A fixed one-second window per key. A call is admitted when the window's count as this
gateway last heard it from Redis, plus the calls it admitted since, is under the key's
rate; the calls admitted are added to the shared count (INCRBY, one pipeline for every
key) every `flush_seconds` (50 ms), not once per call, so the hot path makes no Redis
round trip. The price: each gateway may admit up to `flush_seconds` worth of calls past
the rate before it hears of the others'. When Redis cannot be reached, each gateway goes
on counting alone (a key gets its rate from every gateway) and logs it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

WINDOW_TTL_SECONDS = 5


@dataclass(slots=True)
class _Window:
    second: int
    admitted: int = 0
    """admitted by this gateway and not yet added to Redis"""
    known: int = 0
    """the window's cluster-wide count, as Redis last answered"""


class RateLimiter:
    def __init__(
        self,
        redis: aioredis.Redis,
        prefix: str,
        *,
        flush_seconds: float = 0.05,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis
        self.prefix = prefix
        self.flush_seconds = flush_seconds
        self.clock = clock
        self._windows: dict[str, _Window] = {}
        self._failing = False
        self._stopping = asyncio.Event()

    def admit(self, key_id: str, rate: float) -> float | None:
        """None when the call may go ahead; else the seconds until the key's next window (Retry-After)."""
        if rate <= 0:
            return None
        now = self.clock()
        second = int(now)
        window = self._windows.get(key_id)
        if window is None or window.second != second:
            window = self._windows[key_id] = _Window(second)
        if window.known + window.admitted >= max(1, math.ceil(rate)):
            return max(0.001, second + 1 - now)
        window.admitted += 1
        return None

    async def run(self) -> None:
        """Flush until `stop` (a task of the gateway's lifespan); stopped between flushes, never inside a Redis call
        (a pipeline cancelled mid-call can leave its connection waiting)."""
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(), self.flush_seconds)
            except TimeoutError:
                await self.flush()

    def stop(self) -> None:
        self._stopping.set()

    async def flush(self) -> None:
        current = int(self.clock())
        for key_id in [k for k, w in self._windows.items() if w.second < current and not w.admitted]:
            del self._windows[key_id]
        pending = [(key_id, window, window.admitted) for key_id, window in self._windows.items() if window.admitted]
        if not pending:
            return
        for _, window, count in pending:
            window.admitted -= count
        pipe = self.redis.pipeline(transaction=False)
        for key_id, window, count in pending:
            name = f"{self.prefix}{key_id}:{window.second}"
            pipe.incrby(name, count)
            pipe.expire(name, WINDOW_TTL_SECONDS)
        try:
            answers = await pipe.execute()
        except (RedisError, OSError) as exc:
            for _, window, count in pending:
                window.admitted += count  # still counted here: this gateway limits alone until Redis is back
            if not self._failing:
                log.warning("per-key rates counted by this gateway alone: Redis did not answer: %s", exc)
            self._failing = True
            return
        self._failing = False
        for (_, window, _count), total in zip(pending, answers[::2], strict=True):
            window.known = max(window.known, int(total))
