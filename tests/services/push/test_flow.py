"""Push flow control on fake time: the window, the rate cap, the circuit breaker, Retry-After, the backoff."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.push.flow import (
    Backoff,
    CircuitBreaker,
    CircuitState,
    ConcurrencyWindow,
    RateLimiter,
    Sleep,
    retry_after_seconds,
)
from tests.support.clock import FakeClock


def answer_a_round(window: ConcurrencyWindow) -> None:
    """Every delivery of a full window answered with a success."""
    for _ in range(window.size):
        window.on_success()


def test_the_window_starts_at_one_and_doubles_per_round_of_answers_up_to_the_max() -> None:
    window = ConcurrencyWindow(max_in_flight=64)
    sizes = [window.size]
    for _ in range(8):
        answer_a_round(window)
        sizes.append(window.size)
    assert sizes == [1, 2, 4, 8, 16, 32, 64, 64, 64]
    assert window.max == 64


def test_trouble_halves_the_window_which_then_climbs_back_one_per_round() -> None:
    window = ConcurrencyWindow(max_in_flight=64)
    for _ in range(6):
        answer_a_round(window)
    window.on_trouble()
    assert window.size == 32
    sizes = []
    for _ in range(3):
        answer_a_round(window)
        sizes.append(window.size)
    assert sizes == [33, 34, 35]


def test_repeated_trouble_shrinks_the_window_to_one_delivery_at_a_time_never_zero() -> None:
    window = ConcurrencyWindow(max_in_flight=10)
    for _ in range(4):
        answer_a_round(window)
    sizes = []
    for _ in range(5):
        window.on_trouble()
        sizes.append(window.size)
    assert sizes == [5, 2, 1, 1, 1]


def test_after_the_circuit_closes_the_window_slow_starts_from_one_to_the_max() -> None:
    window = ConcurrencyWindow(max_in_flight=16)
    for _ in range(4):
        answer_a_round(window)
    window.on_trouble()
    window.reset()
    sizes = [window.size]
    for _ in range(4):
        answer_a_round(window)
        sizes.append(window.size)
    assert sizes == [1, 2, 4, 8, 16]


def test_an_edited_max_in_flight_clamps_the_window_or_lets_it_grow() -> None:
    window = ConcurrencyWindow(max_in_flight=16)
    for _ in range(4):
        answer_a_round(window)
    window.resize(4)
    assert (window.size, window.max) == (4, 4)
    answer_a_round(window)
    assert window.size == 4
    window.resize(8)
    answer_a_round(window)
    assert window.size == 8  # no trouble seen: slow start up to the new max
    window.on_trouble()
    window.resize(16)
    answer_a_round(window)
    answer_a_round(window)
    assert window.size == 6  # after trouble: one more per round
    with pytest.raises(ValueError, match="max_in_flight must be at least 1, not 0"):
        window.resize(0)


def fake_sleep(clock: FakeClock, overshoot: float = 0.0) -> Sleep:
    """A sleep that moves the fake clock on (late by `overshoot`) instead of waiting."""

    async def sleep(seconds: float) -> None:
        clock.advance(seconds + overshoot)

    return sleep


def test_a_rate_cap_is_never_exceeded_over_a_simulated_minute_and_is_reached() -> None:
    clock = FakeClock(0.0)
    limiter = RateLimiter(10, clock, fake_sleep(clock))
    starts: list[float] = []

    async def deliver_for_a_minute() -> None:
        while clock() < 60:
            await limiter.acquire()
            starts.append(clock())

    asyncio.run(deliver_for_a_minute())
    in_the_minute = [t for t in starts if t < 60]
    assert len(in_the_minute) == 600
    for i, start in enumerate(starts):  # no second-long window (a microsecond of float slack) holds more than 10
        assert sum(start <= t < start + 1 - 1e-6 for t in starts[i:]) <= 10


@settings(deadline=None)
@given(
    rate=st.floats(0.1, 200),
    burst_in_seconds=st.floats(0, 1),
    overshoot=st.floats(0, 0.5),
    idle_gaps=st.lists(st.floats(0, 5), min_size=1, max_size=40),
)
def test_no_window_of_time_sees_more_than_rate_times_its_length_plus_the_burst(
    rate: float, burst_in_seconds: float, overshoot: float, idle_gaps: list[float]
) -> None:
    clock = FakeClock(0.0)
    burst = max(1.0, rate * burst_in_seconds)
    limiter = RateLimiter(rate, clock, fake_sleep(clock, overshoot / rate), burst=burst)
    starts: list[float] = []

    async def deliver() -> None:
        for gap in idle_gaps:  # deliveries come in spells after idle gaps; sleeps wake late
            clock.advance(gap)
            for _ in range(int(burst) + 3):
                await limiter.acquire()
                starts.append(clock())

    asyncio.run(deliver())
    # starts i..j (j - i + 1 of them) within rate * (t_j - t_i) + burst, for every i <= j, is
    # (j - rate * t_j) - (i - rate * t_i) <= burst - 1: one pass with the least of the second term so far
    least_so_far = float("inf")
    for k, start in enumerate(starts):
        least_so_far = min(least_so_far, k - rate * start)
        assert (k - rate * start) - least_so_far <= burst - 1 + 1e-6


def test_no_rate_means_no_wait_and_an_edited_rate_applies_to_the_next_starts() -> None:
    clock = FakeClock(0.0)
    limiter = RateLimiter(None, clock, fake_sleep(clock))

    async def starts_in(seconds: float) -> int:
        """Starts (of as many as allowed) within the next `seconds`."""
        ends, count = clock() + seconds, 0
        while True:
            await limiter.acquire()
            if clock() >= ends:
                return count
            count += 1

    async def thousand_starts() -> None:
        for _ in range(1000):
            await limiter.acquire()

    asyncio.run(thousand_starts())
    assert clock() == 0.0
    limiter.set_rate(5)
    assert asyncio.run(starts_in(10)) == 50
    limiter.set_rate(50)
    assert abs(asyncio.run(starts_in(10)) - 500) <= 1
    limiter.set_rate(None)
    began = clock()
    asyncio.run(thousand_starts())
    assert clock() == began
    with pytest.raises(ValueError, match="rate_per_second must be positive or None, not 0"):
        limiter.set_rate(0)


def a_breaker(clock: FakeClock) -> CircuitBreaker:
    return CircuitBreaker(failures=3, open_seconds=5, open_max_seconds=30, clock=clock)


def opened(clock: FakeClock) -> CircuitBreaker:
    breaker = a_breaker(clock)
    for _ in range(3):
        breaker.record_trouble()
    return breaker


def test_the_circuit_opens_after_n_troubles_in_a_row_only() -> None:
    clock = FakeClock()
    breaker = a_breaker(clock)
    for _ in range(2):
        breaker.record_trouble()
    breaker.record_success()
    for _ in range(2):
        breaker.record_trouble()
    assert (breaker.state, breaker.allow(), breaker.opened_at) == (CircuitState.CLOSED, True, None)
    breaker.record_trouble()
    assert (breaker.state, breaker.allow()) == (CircuitState.OPEN, False)
    assert breaker.opened_at == int(clock.now * 1000)
    assert breaker.wait_seconds() == 5


def test_after_the_wait_exactly_one_probe_goes_through_and_its_success_closes_the_circuit() -> None:
    clock = FakeClock()
    breaker = opened(clock)
    clock.advance(4.9)
    assert not breaker.allow()
    assert breaker.wait_seconds() == pytest.approx(0.1)
    clock.advance(0.1)
    assert [breaker.allow() for _ in range(5)] == [True, False, False, False, False]
    assert breaker.state is CircuitState.HALF_OPEN
    clock.advance(60)
    assert not breaker.allow()  # still waiting for the probe's answer
    breaker.record_success()
    assert (breaker.state, breaker.opened_at, [breaker.allow() for _ in range(3)]) == (
        CircuitState.CLOSED,
        None,
        [True, True, True],
    )


def test_each_failed_probe_doubles_the_wait_up_to_the_longest() -> None:
    clock = FakeClock()
    breaker = opened(clock)
    first_opened_at = breaker.opened_at
    waits = []
    for _ in range(5):
        waits.append(breaker.wait_seconds())
        clock.advance(breaker.wait_seconds())
        assert breaker.allow()
        breaker.record_trouble()
    assert waits == [5, 10, 20, 30, 30]
    assert breaker.opened_at == first_opened_at  # open since the first time, through the failed probes
    clock.advance(30)
    assert breaker.allow()
    breaker.record_success()
    for _ in range(3):
        breaker.record_trouble()
    assert breaker.wait_seconds() == 5  # a fresh opening waits the first wait again


def test_late_troubles_of_deliveries_started_before_it_opened_do_not_extend_the_wait() -> None:
    clock = FakeClock()
    breaker = opened(clock)
    clock.advance(3)
    for _ in range(10):
        breaker.record_trouble()
    assert breaker.wait_seconds() == 2
    clock.advance(2)
    assert breaker.allow()


NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        ("-5", 0.0),
        ("Wed, 01 May 2024 12:01:30 GMT", 90.0),  # IMF-fixdate
        ("Wednesday, 01-May-24 12:01:30 GMT", 90.0),  # obsolete RFC 850 form
        ("Wed May  1 12:01:30 2024", 90.0),  # obsolete asctime form
        ("Wed, 01 May 2024 11:00:00 GMT", 0.0),  # in the past
        ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0),
        ("999999", 3600.0),  # longer than the longest honoured
        ("9" * 5000, 3600.0),
        ("Thu, 01 May 2025 12:00:00 GMT", 3600.0),
    ],
)
def test_retry_after_is_read_in_both_forms_and_kept_between_zero_and_the_longest(header: str, seconds: float) -> None:
    assert retry_after_seconds(header, NOW, max_seconds=3600) == seconds


@pytest.mark.parametrize(
    "header",
    [None, "", "soon", "1.5", "12abc", "+-3", "Mon, 32 Nov 1994 08:49:37 GMT", "Wed, 01 Foo 2024 12:00:00 GMT"],
)
def test_an_unreadable_retry_after_is_none(header: str | None) -> None:
    assert retry_after_seconds(header, NOW, max_seconds=3600) is None


@given(st.one_of(st.text(), st.from_regex(r"[A-Za-z]{3}, [0-9]{2} [A-Za-z]{3} -?[0-9]{1,6} [0-9:]{8} [A-Z+0-9-]{3,5}")))
def test_whatever_an_endpoint_sends_as_retry_after_is_none_or_a_wait_within_bounds(header: str) -> None:
    seconds = retry_after_seconds(header, NOW, max_seconds=3600)
    assert seconds is None or 0 <= seconds <= 3600


def test_the_backoff_ceiling_doubles_from_half_a_second_to_thirty_and_resets_on_success() -> None:
    top_of_the_jitter = Backoff(rand=lambda: 1.0)
    waits = [top_of_the_jitter.next_wait_seconds() for _ in range(9)]
    assert waits == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    top_of_the_jitter.reset()
    assert top_of_the_jitter.next_wait_seconds() == 0.5
    assert Backoff(rand=lambda: 0.0).next_wait_seconds() == 0.0  # full jitter: anywhere from zero


def test_the_backoff_jitters_below_the_ceiling() -> None:
    backoff = Backoff()
    waits = [backoff.next_wait_seconds() for _ in range(200)]
    assert all(0 <= wait < 30 for wait in waits)
    assert len(set(waits[10:])) > 150
