"""Flusher: the background flush, the group commit behind SYNC_FLUSH, and checkpoints.

Every `flush_interval_ms` (both modes): the CommitLog is synced up to its write
position, and ConsumeQueues with a backlog are written to their files. SYNC_FLUSH puts
also wait on `wait_durable`: each waiting put kicks the group commit, which
syncs once for every record written so far and wakes all whose records that
sync covered. The sync runs in a worker thread (fdatasync releases the GIL), so
new puts keep arriving, and join the next round, while one is in progress.
Every `checkpoint_interval_ms` every ConsumeQueue is written, ConsumeQueue and
index files are synced, and the checkpoint advances.

A failed sync makes the store read-only for good (`failure`): after an fsync
error the kernel may already have dropped the dirty pages, marked them clean and
will report nothing on the next fsync ("fsyncgate"), so no later round may
claim durability (no sync, no checkpoint) and no newer record is acknowledged
over the gap. Reads go on; a restart recovers from the last checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from libs.errors import FlushTimeout
from libs.store.checkpoint import Checkpoint
from libs.store.commitlog import CommitLog
from libs.store.config import StoreConfig
from libs.store.queue_table import ConsumeQueueTable
from libs.tasks import cancelled

log = logging.getLogger(__name__)


class Flusher:
    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        queues: ConsumeQueueTable,
        sync_index: Callable[[], None],
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self.queues = queues
        self.sync_index = sync_index
        self.clock = clock
        self.monotonic = monotonic
        self._waiters: list[tuple[int, asyncio.Future[None], float]] = []
        """(offset to be durable, the waiting put's future, its deadline on the loop clock)"""
        self._kick = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._round = asyncio.Lock()
        self._checkpointing = threading.Lock()
        """A round cancelled while its worker thread syncs leaves that thread running: the next round's
        thread waits for it, so checkpoints are written one at a time and the newest last."""
        self._last_checkpoint = -math.inf
        """On `monotonic`: a step of the wall clock (`clock`, which stamps the checkpoint) neither stops checkpoints
        until it has caught up again (a step back) nor changes how often they are written."""
        self.syncs = 0
        self.failure: OSError | None = None
        """The sync error that made the store read-only, until it is restarted."""

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._periodic(), name="store-flush"),
            asyncio.create_task(self._group_commit(), name="store-group-commit"),
            asyncio.create_task(self._watchdog(), name="store-flush-watchdog"),
        ]

    async def stop(self) -> None:
        await cancelled(*self._tasks)
        self._tasks = []
        await self.flush(checkpoint=True)

    async def wait_durable(self, offset: int) -> None:
        """Return once every CommitLog byte below `offset` is on disk (FlushTimeout past the limit)."""
        if self.commitlog.flushed_offset >= offset:
            return
        if self.failure is not None:
            raise self._not_durable(self.failure)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._waiters.append((offset, future, loop.time() + self.config.sync_flush_timeout_ms / 1000))
        self._kick.set()
        await future  # resolved by a group commit, or failed by the watchdog past the deadline

    async def flush(self, *, checkpoint: bool = False) -> None:
        """One round: sync the CommitLog, wake covered waiters, write queue units, maybe checkpoint.

        Units are written after the waiters are woken: a put is durable once its CommitLog
        bytes are (recovery rebuilds units), so a full disk refusing a ConsumeQueue write
        fails the round and holds the checkpoint back, but never a put.
        """
        async with self._round:
            if self.failure is not None:
                return  # a sync failed: nothing may be called durable again before a restart
            now, since = self.clock(), self.monotonic()
            checkpoint = checkpoint or since - self._last_checkpoint >= self.config.checkpoint_interval_ms / 1000
            target = self.commitlog.write_offset
            async with self._syncing():
                await asyncio.to_thread(self.commitlog.sync, target)
                self.syncs += 1
            self._wake(target)
            self.queues.write_pending(everything=checkpoint)
            if checkpoint:
                dirty = self.queues.take_dirty_files()
                async with self._syncing():
                    await asyncio.to_thread(self._sync_dispatch, dirty, Checkpoint(target, target, int(now * 1000)))
                self._last_checkpoint = since

    @contextlib.asynccontextmanager
    async def _syncing(self) -> AsyncIterator[None]:
        """A failed sync makes the store read-only for good (see the module's docstring)."""
        try:
            yield
        except OSError as exc:
            self.failure = exc
            log.critical("a sync of the store failed (%s): the store is read-only until the broker restarts", exc)
            raise

    def _sync_dispatch(self, dirty: list[Path], checkpoint: Checkpoint) -> None:
        """Sync the queue and index files, then write the checkpoint that counts on them (a worker thread's
        work: the checkpoint's own fsyncs, in the event loop, held every put and answer for up to 40 ms)."""
        with self._checkpointing:
            self.queues.sync_files(dirty)
            self.sync_index()
            checkpoint.write(self.config.checkpoint_path)

    @staticmethod
    def _not_durable(exc: BaseException) -> FlushTimeout:
        return FlushTimeout(
            f"the disk refused the write: {exc}; the message is stored but not durable, "
            "and the store takes no more writes until the broker is restarted"
        )

    def _fail_waiters(self, exc: BaseException) -> None:
        failure = self._not_durable(exc) if self.failure is not None else FlushTimeout(f"the flush failed: {exc}")
        for _, future, _ in self._waiters:
            if not future.done():
                future.set_exception(failure)
        self._waiters = []

    def _wake(self, durable: int) -> None:
        still: list[tuple[int, asyncio.Future[None], float]] = []
        for waiter in self._waiters:
            if waiter[0] <= durable:
                if not waiter[1].done():
                    waiter[1].set_result(None)
            elif not waiter[1].done():
                still.append(waiter)
        self._waiters = still

    async def _watchdog(self) -> None:
        """Fails puts whose sync is overdue; independent of the flush loop, which may be stuck."""
        timeout = self.config.sync_flush_timeout_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(0.1, timeout / 4))
            now = loop.time()
            if not any(deadline <= now for _, _, deadline in self._waiters):
                continue
            late = FlushTimeout(
                f"the disk did not confirm the write within {self.config.sync_flush_timeout_ms} ms; "
                "the message is stored but not known to be durable"
            )
            for _, future, deadline in self._waiters:
                if deadline <= now and not future.done():
                    future.set_exception(late)
            self._waiters = [w for w in self._waiters if not w[1].done()]

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_interval_ms / 1000)
            try:
                await self.flush()
            except Exception as exc:
                log.exception("flushing the store failed; will try again")
                self._fail_waiters(exc)

    async def _group_commit(self) -> None:
        while True:
            await self._kick.wait()
            self._kick.clear()
            try:
                await self.flush()
            except Exception as exc:
                log.exception("a group commit failed")
                self._fail_waiters(exc)
