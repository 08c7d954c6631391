"""Timeouts that fire inside an async test's event loop.

pytest-timeout's signal method raises `Failed` from a SIGALRM handler wherever the main thread is. In an asyncio
test that is often inside one of the loop's callbacks (a transport reading an answer, a future's done-callback),
and asyncio runs every callback under `except BaseException` (all but SystemExit and KeyboardInterrupt), logs what
it caught and goes on: the test runs past its timeout as if none were set. The chaos test hung that way for 16 min
past its 240 s at 4a84e19, and a copy of it with a 30 s timeout passed after 80 s.

So an async test's coroutine runs under `asyncio.timeout` of its own timeout: at the deadline it is cancelled
where it awaits, its `finally` and `async with` blocks stop what it started, and it fails saying so.
pytest-timeout's alarm stays, GRACE_SECONDS later, for a clean-up that does not end.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
from pytest_timeout import _parse_marker, get_env_settings  # type: ignore[import-untyped]

GRACE_SECONDS = 60.0
"""After an async test's own deadline, how long its clean-up has before pytest-timeout's alarm."""

DEADLINE = pytest.StashKey[float]()

AsyncTest = Callable[..., Coroutine[Any, Any, Any]]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """At collection: each async test's deadline noted, and its pytest-timeout marker moved GRACE_SECONDS later."""
    default = get_env_settings(config).timeout
    for item in items:
        if not isinstance(item, pytest.Function) or not inspect.iscoroutinefunction(item.obj):
            continue
        marker = item.get_closest_marker("timeout")
        settings = _parse_marker(marker) if marker is not None else None
        seconds = settings.timeout if settings is not None and settings.timeout is not None else default
        if not seconds:
            continue
        item.stash[DEADLINE] = float(seconds)
        kept = {"method": settings.method} if settings is not None and settings.method is not None else {}
        item.add_marker(pytest.mark.timeout(float(seconds) + GRACE_SECONDS, **kept), append=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """The test's coroutine function, bounded by its deadline, for the call (pytest-asyncio runs `item.obj`)."""
    if isinstance(item, pytest.Function) and DEADLINE in item.stash:
        item.obj = within(item.stash[DEADLINE], item.obj)
    return (yield)


def within(seconds: float, test: AsyncTest) -> AsyncTest:
    @functools.wraps(test)
    async def bounded(*args: Any, **kwargs: Any) -> Any:
        deadline = asyncio.timeout(seconds)
        try:
            async with deadline:
                return await test(*args, **kwargs)
        except TimeoutError:
            if deadline.expired():
                pytest.fail(f"Timeout: the test ran past its {seconds:g} s and was cancelled where it waited")
            raise

    return bounded
