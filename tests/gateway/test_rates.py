"""RateLimiter: a key's calls a second, shared by the gateways through Redis, and what happens without Redis."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.auth.rates import RateLimiter
from tests.support.clock import FakeClock

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def redis() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
    yield client
    await client.aclose()


def admitted(limiter: RateLimiter, key: str, rate: float, calls: int) -> int:
    return sum(limiter.admit(key, rate) is None for _ in range(calls))


async def test_one_gateway_admits_the_rate_and_says_when_the_next_window_opens(redis: aioredis.Redis) -> None:
    clock = FakeClock(1_700_000_000.25)
    limiter = RateLimiter(redis, f"test:rate:{secrets.token_hex(4)}:", clock=clock)
    assert admitted(limiter, "k1", 10, 25) == 10
    assert limiter.admit("k1", 10) == pytest.approx(0.75)
    assert admitted(limiter, "k2", 10, 10) == 10  # each key its own count
    clock.advance(1)
    assert admitted(limiter, "k1", 10, 25) == 10
    assert limiter.admit("k1", 0) is None  # 0: unlimited


async def test_gateways_share_a_keys_rate_once_they_have_flushed(redis: aioredis.Redis) -> None:
    clock = FakeClock(1_700_000_100.0)
    prefix = f"test:rate:{secrets.token_hex(4)}:"
    first, second = (RateLimiter(redis, prefix, clock=clock) for _ in range(2))
    assert admitted(first, "k", 20, 15) == 15
    await first.flush()
    await second.flush()  # nothing of its own yet: learns nothing, admits by its own count
    assert admitted(second, "k", 20, 3) == 3
    await second.flush()  # adds its 3 to the shared 15 and hears 18
    assert admitted(second, "k", 20, 10) == 2
    # the first has not heard of the second's calls: it admits up to its own view (the overshoot is
    # one flush interval's worth), then hears the shared count and refuses
    assert admitted(first, "k", 20, 10) == 5
    await first.flush()
    assert first.admit("k", 20) is not None
    assert second.admit("k", 20) is not None


async def test_without_redis_each_gateway_still_limits_alone() -> None:
    dead = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    clock = FakeClock(1_700_000_200.0)
    limiter = RateLimiter(dead, "test:rate:", clock=clock)
    assert admitted(limiter, "k", 5, 5) == 5
    await limiter.flush()  # fails: the 5 stay counted here
    assert limiter.admit("k", 5) is not None
    await dead.aclose()
