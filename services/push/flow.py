"""Flow control of one push subscription: how many deliveries at once, how fast, when to stop and probe.

The delivery engine keeps one of each per subscription:
- `ConcurrencyWindow`: deliveries allowed in flight now; AIMD with slow start, as Pub/Sub push.
- `RateLimiter`: the optional `rate_per_second` cap on delivery starts (a token bucket).
- `CircuitBreaker`: stops deliveries after sustained endpoint trouble and lets one probe through
  after a wait that doubles with each failed probe.
- `retry_after_seconds`: an endpoint's `Retry-After` header, in seconds from now.
- `Backoff`: the wait before a held message is tried again when the endpoint gave no Retry-After.

"Trouble" is the endpoint's, not the message's: 429, 502, 503, 504, timeouts, no connection.
Nothing here does I/O; clocks, sleeps and randomness are injected so tests run on fake time.
"""

from __future__ import annotations

import asyncio
import enum
import random
import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC
from email.utils import parsedate_to_datetime

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class ConcurrencyWindow:
    """Deliveries allowed in flight: starts at 1, grows by one per success up to the slow-start
    threshold (doubling per round of answers), then by one per `size` successes; trouble halves it."""

    def __init__(self, max_in_flight: int) -> None:
        self._max = _at_least_one("max_in_flight", max_in_flight)
        self._size = 1
        self._threshold: int | None = None  # slow start up to here; None: no trouble yet, up to the max
        self._successes = 0  # counted towards the next additive increase

    @property
    def size(self) -> int:
        return self._size

    @property
    def max(self) -> int:
        return self._max

    def on_success(self) -> None:
        if self._size >= self._max:
            return
        if self._threshold is None or self._size < self._threshold:
            self._size += 1
            return
        self._successes += 1
        if self._successes >= self._size:
            self._size, self._successes = self._size + 1, 0

    def on_trouble(self) -> None:
        self._threshold = max(1, self._size // 2)
        self._size, self._successes = self._threshold, 0

    def reset(self) -> None:
        """After the circuit closes: from 1 again, slow start all the way to the max."""
        self._size, self._threshold, self._successes = 1, None, 0

    def resize(self, max_in_flight: int) -> None:
        """The subscription's `max_in_flight` was edited."""
        self._max = _at_least_one("max_in_flight", max_in_flight)
        self._size = min(self._size, self._max)


class RateLimiter:
    """At most `rate_per_second` delivery starts per second; `None` is no cap.

    A token bucket holding `burst` tokens, 1 by default: starts are spaced 1/rate apart, so any
    window of T seconds sees at most rate*T + 1 starts and no second-long window more than the
    rate, as a receiver counting per second expects. A larger burst lets starts catch up after
    an idle spell (or a late wake-up) at the price of that per-second guarantee."""

    def __init__(
        self,
        rate_per_second: float | None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        *,
        burst: float = 1.0,
    ) -> None:
        self._clock, self._sleep, self._burst = clock, sleep, max(1.0, burst)
        self._rate: float | None = None
        self._tokens = 0.0
        self._refilled_at = clock()
        self.set_rate(rate_per_second)

    @property
    def rate(self) -> float | None:
        return self._rate

    def set_rate(self, rate_per_second: float | None) -> None:
        """The subscription's `rate_per_second` was edited; starts already allowed stay allowed."""
        if rate_per_second is not None and rate_per_second <= 0:
            raise ValueError(f"rate_per_second must be positive or None, not {rate_per_second}")
        if self._rate is None:
            self._tokens = self._burst
        else:
            self._refill()
        self._rate = rate_per_second
        self._refilled_at = self._clock()

    async def acquire(self) -> None:
        """Wait until one more start is allowed, and take it."""
        while self._rate is not None:
            self._refill()
            # A hair under one token counts as one, or float rounding could wake us forever early.
            if self._tokens >= 1.0 - 1e-9:
                self._tokens -= 1.0
                return
            await self._sleep((1.0 - self._tokens) / self._rate)

    def _refill(self) -> None:
        now = self._clock()
        if self._rate is not None:
            self._tokens = min(self._burst, self._tokens + (now - self._refilled_at) * self._rate)
        self._refilled_at = now


class CircuitState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"  # one probe is out; its outcome closes or reopens the circuit


class CircuitBreaker:
    """Opens after `failures` troubles in a row; after `open_seconds` lets one probe through.
    A failed probe reopens it for twice the last wait, up to `open_max_seconds`; any success closes it.

    `clock` gives seconds since the epoch (time.time) so that `opened_at` can be shown as
    `SubscriptionStatus.circuit_opened_at`. Every probe `allow()` lets through must end in
    `record_success()` or `record_trouble()`: until then the circuit stays half open."""

    def __init__(self, failures: int, open_seconds: float, open_max_seconds: float, clock: Clock = time.time) -> None:
        self._failures = _at_least_one("failures", failures)
        self._open_seconds, self._open_max_seconds, self._clock = open_seconds, open_max_seconds, clock
        self._state = CircuitState.CLOSED
        self._troubles = 0
        self._wait = open_seconds
        self._opened_at: float | None = None
        self._probe_at = 0.0

    @property
    def state(self) -> CircuitState:
        """Stays `open` after the wait has ended until `allow()` lets the probe through."""
        return self._state

    @property
    def opened_at(self) -> int | None:
        """When the circuit opened (ms since the epoch), kept through failed probes; None when closed."""
        return None if self._opened_at is None else int(self._opened_at * 1000)

    def wait_seconds(self) -> float:
        """Until `allow()` lets the next probe through; 0 when closed or while a probe is out."""
        if self._state is not CircuitState.OPEN:
            return 0.0
        return max(0.0, self._probe_at - self._clock())

    def allow(self) -> bool:
        """May a delivery start now? When open and the wait is over: yes, once (the probe)."""
        if self._state is CircuitState.CLOSED:
            return True
        if self._state is CircuitState.OPEN and self._clock() >= self._probe_at:
            self._state = CircuitState.HALF_OPEN
            return True
        return False

    def record_success(self) -> None:
        """The endpoint answered (anything but trouble): close, forget the troubles and the waits."""
        self._state, self._troubles, self._wait, self._opened_at = CircuitState.CLOSED, 0, self._open_seconds, None

    def record_trouble(self) -> None:
        if self._state is CircuitState.HALF_OPEN:
            self._wait = min(self._wait * 2, self._open_max_seconds)
            self._open()
        elif self._state is CircuitState.CLOSED:
            self._troubles += 1
            if self._troubles >= self._failures:
                self._opened_at = self._clock()
                self._open()
        # when open: answers to deliveries started before it opened change nothing

    def _open(self) -> None:
        self._state = CircuitState.OPEN
        self._probe_at = self._clock() + self._wait


_DELTA_SECONDS = re.compile(r"-?[0-9]+")


def retry_after_seconds(header_value: str | None, now_epoch_seconds: float, max_seconds: float) -> float | None:
    """A `Retry-After` (RFC 9110 section 10.2.3: delta-seconds or an HTTP-date) as seconds from now,
    between 0 (negative, or a date past) and `max_seconds`; None when absent or unreadable."""
    if header_value is None:
        return None
    value = header_value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        seconds = float(value)  # not int(): a few thousand digits would raise, and this is the endpoint's text
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:  # an HTTP-date is always GMT; the asctime form does not say so
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - now_epoch_seconds
    return min(max(0.0, seconds), max_seconds)


class Backoff:
    """Waits before a held message is tried again after endpoint trouble without a Retry-After:
    exponential with full jitter (uniform between 0 and min(cap, base * 2**n)), reset on success."""

    def __init__(
        self, base_seconds: float = 0.5, cap_seconds: float = 30.0, rand: Callable[[], float] = random.random
    ) -> None:
        self._base, self._cap, self._rand = base_seconds, cap_seconds, rand
        self._troubles = 0

    def next_wait_seconds(self) -> float:
        ceiling = min(self._cap, self._base * 2.0 ** min(self._troubles, 64))  # the exponent bounded: no overflow
        self._troubles += 1
        return self._rand() * ceiling

    def reset(self) -> None:
        self._troubles = 0


def _at_least_one(name: str, count: int) -> int:
    if count < 1:
        raise ValueError(f"{name} must be at least 1, not {count}")
    return count
