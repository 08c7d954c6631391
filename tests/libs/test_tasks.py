"""libs.tasks.cancelled: a helper task ended, without swallowing its caller's own cancellation."""

from __future__ import annotations

import asyncio

import pytest

from libs.tasks import cancelled


async def test_the_task_is_cancelled_and_has_ended_when_it_returns() -> None:
    helper = asyncio.create_task(asyncio.Event().wait())
    await asyncio.sleep(0)

    await cancelled(helper)

    assert helper.cancelled()


async def test_a_cancellation_of_the_caller_while_it_waits_reaches_the_caller() -> None:
    """The helper takes a while to end; the caller is cancelled meanwhile (its deadline) and must see it."""
    ending, release = asyncio.Event(), asyncio.Event()

    async def slow_to_end() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ending.set()
            await release.wait()
            raise

    helper = asyncio.create_task(slow_to_end())
    await asyncio.sleep(0)
    caller = asyncio.create_task(cancelled(helper))
    await ending.wait()
    caller.cancel()
    release.set()

    with pytest.raises(asyncio.CancelledError):
        await caller
    assert caller.cancelled()


async def test_another_error_of_the_task_is_raised() -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    helper = asyncio.create_task(fails_on_cancel())
    await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancelled(helper)
