"""A slave's replica follower ends when its broker's app stops, whatever it was doing.

A promoted slave restarts its app as the new master, and the restart waits for the follower
to end: one that went on following its dead master held the promotion for good (the broker
never served again, and SIGTERM could not stop it). It was cancelled while it ended the
helpers of a stream that had broken, and that wait swallowed the cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from libs.store.message_store import MessageStore
from services.broker.replica_follower import ReplicaFollower
from services.broker.replication_state import FollowerState
from services.broker.topics import TopicTable
from tests.support.serving import free_port
from tests.support.store import make_store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    opened = make_store(tmp_path / "slave")
    yield opened
    await opened.close()


class SlowToEndAcks(ReplicaFollower):
    """Its ack sender takes a moment to end once cancelled (as a call in flight does), and says when it begins to."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ending, self.release = asyncio.Event(), asyncio.Event()

    async def _send_acks_forever(self, client: httpx.AsyncClient) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.ending.set()
            await self.release.wait()
            raise


async def test_a_follower_stopped_while_it_ends_a_broken_streams_helpers_ends(store: MessageStore) -> None:
    dead_master = f"127.0.0.1:{free_port()}"
    follower = SlowToEndAcks(FollowerState(dead_master), store, cast(TopicTable, None), None, 1, "127.0.0.1:1")
    following = asyncio.create_task(follower.run())
    await follower.ending.wait()  # the stream broke (nobody at the master's address): its helpers are ending
    following.cancel()  # the app stops meanwhile (a restart as the promoted master)
    follower.release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(following, 5)
    assert following.cancelled()
