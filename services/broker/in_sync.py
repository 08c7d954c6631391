"""InSyncReplicas: a master's slaves that have its log, and a SYNC_MASTER's puts that wait for them.

Each slave says how far it has written (`PUT /internal/replication/slaves/{id}`, after each
chunk and at each heartbeat; a SYNC_FLUSH slave only once its copy is on its disk). When a
slave joins the in-sync set and when it leaves is services.broker.in_sync_rules' (Kafka's
rules: it joins once it has the master's high watermark, everything already answered; it
leaves once it has not caught up for `lag_max`, or been silent for `timeout`). Under a steady
load the watermark runs ahead of every word of a slave (each trails the writes answered since
it was sent), so a SYNC_MASTER's writes wait for a slave that is *joining* (caught up lately,
not yet at the watermark) as for a member, up to `timeout` once: the watermark stops at what it
has, and its next word reaches it. Nothing is recorded for a joining slave until it joins; one
that fails to join tries again `lag_max` later at the earliest. Under
SYNC_MASTER every write (`MessageStore.put_reporting`: sends, transaction ends, retries,
timers) is answered only once every in-sync slave has it. A slave that does not confirm a put
within `timeout` leaves the set, said in the log, by the `replica_out_of_sync` event and by
`GET /internal/replication`: from then on the puts no longer wait for it (RocketMQ 5's in-sync
state set shrinking). Under a controller, every shrink is recorded there first (`confirm`),
before any put stops waiting for the slave that left. With no slave in sync, a put is answered
once the master has it, as under ASYNC_MASTER.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from libs.errors import ReplicationTimeout
from libs.events.writer import EventWriter
from services.broker.in_sync_rules import InSyncRules, SlaveProgress

log = logging.getLogger(__name__)


class InSyncReplicas:
    def __init__(
        self,
        broker: str,
        timeout: float,
        events: EventWriter,
        clock: Callable[[], float] = time.monotonic,
        lag_max: float = 15.0,
    ) -> None:
        self.broker = broker
        self.timeout = timeout
        self.events = events
        self.clock = clock
        self.rules = InSyncRules(lag_max, timeout, clock)
        self.slaves: dict[int, SlaveProgress] = {}
        self.answered: int | None = None
        """A SYNC_MASTER's high watermark: everything below it was answered to a client (at start: its whole log,
        answered in earlier runs, maybe). None: an ASYNC_MASTER's, which answers whatever it stores at once."""
        self._shrinking = asyncio.Lock()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._joined = asyncio.Event()
        self.grew = asyncio.Event()
        """Set when a slave joins: under a controller, the master records the larger set at once (ControllerLink)."""
        self.confirm: Callable[[list[int]], Awaitable[bool]] | None = None
        """Under a controller: tells it the smaller set (the slave ids kept) before a slave is dropped; False: it
        did not take it (unreachable, or this master's epoch is over), and the put is not acknowledged."""

    def start_with(self, slave_ids: list[int]) -> None:
        """A new master's set at its grant, the controller's: its members hold every write answered before, so this
        master's writes wait for them from the start, until they leave by the rules (recorded first), as if each had
        just caught up."""
        now = self.clock()
        for slave_id in slave_ids:
            self.slaves[slave_id] = SlaveProgress(slave_id, "", heard_at=now, in_sync=True, caught_up_at=now)

    def in_sync(self) -> list[int]:
        return sorted(s.slave_id for s in self.slaves.values() if s.in_sync)

    def acked(self, slave_id: int, address: str, offset: int, master_end: int) -> None:
        """A slave has written everything below `offset`; this master's log ends at `master_end`."""
        slave = self.slaves.get(slave_id)
        if slave is None:
            slave = self.slaves[slave_id] = SlaveProgress(slave_id, address)
        slave.address = address
        self.rules.heard(slave, offset, master_end)
        self._wake()  # first: the writes it (joining) was the last to have are answered, and it has what they raise
        if self.rules.may_join(slave, master_end if self.answered is None else self.answered):
            slave.in_sync, slave.joining = True, False
            self._joined.set()
            self.grew.set()
            log.info("slave %d (%s) of %s is in sync at %d", slave_id, address, self.broker, offset)
            self._event("replica_in_sync", slave, master_end)
        elif self.answered is not None and self.rules.may_start_joining(slave):
            slave.joining = True
            log.info("slave %d (%s) of %s is joining at %d: writes wait for it", slave_id, address, self.broker, offset)

    async def joined(self, slave_id: int, timeout: float) -> bool:
        """Until slave `slave_id` is in the in-sync set, or `timeout` seconds pass; whether it is."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not self._is_in_sync(slave_id):
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            self._joined.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._joined.wait()
        return True

    def _is_in_sync(self, slave_id: int) -> bool:
        slave = self.slaves.get(slave_id)
        return slave is not None and slave.in_sync

    def replicated_to(self) -> int | None:
        """What every in-sync (or joining) slave has (None: no slave is in sync or joining)."""
        offsets = [s.acked for s in self.slaves.values() if s.in_sync or s.joining]
        return min(offsets) if offsets else None

    async def wait(self, offset: int) -> None:
        """Until every in-sync slave has everything below `offset`; those that don't within `timeout` leave the set."""
        self._stop_joining(lambda s: self.rules.lagging(s) or self.rules.silent(s))
        done = self.replicated_to()
        if done is not None and done < offset and any(self.rules.must_leave(s) for s in self.slaves.values()):
            await self.drop_lagging(offset)  # not kept waiting for a slave already past the lag bound
            done = self.replicated_to()
        if done is None or done >= offset:
            self._answer(offset)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, future))
        try:
            async with asyncio.timeout(self.timeout):
                await future
        except TimeoutError:
            await self._drop_behind(offset)
        finally:
            if not future.done():
                future.cancel()
            self._waiters = [w for w in self._waiters if w[1] is not future]

    def _stop_joining(self, failed: Callable[[SlaveProgress], bool]) -> None:
        """Writes stop waiting for the joining slaves that `failed` (nothing to record: they never joined)."""
        for slave in self.slaves.values():
            if slave.joining and failed(slave):
                slave.joining, slave.join_failed_at = False, self.clock()
                log.warning(
                    "slave %d (%s) of %s did not keep up while joining (it has %d): writes no longer wait for it",
                    slave.slave_id,
                    slave.address,
                    self.broker,
                    slave.acked,
                )
                self._wake()

    async def _drop_behind(self, offset: int) -> None:
        self._stop_joining(lambda s: s.acked < offset)
        behind = [s for s in self.slaves.values() if s.in_sync and s.acked < offset]
        if behind and not await self._confirm_without(behind):
            raise ReplicationTimeout(
                f"{self.broker}: stored, but slave(s) {[s.slave_id for s in behind]} did not confirm it within "
                f"{self.timeout:.1f} s and the controller could not be told they left the in-sync set"
            )
        self._drop(behind, offset)

    async def drop_lagging(self, master_end: int) -> None:
        """In-sync slaves that have not caught up for `lag_max`, or said nothing for `timeout`, leave the set (the
        controller told first), so that it never promotes a slave long gone or far behind, under ASYNC_MASTER too,
        where no write waits (a controller's master checks at each report; a SYNC_MASTER's put too, before it
        waits)."""
        async with self._shrinking:  # one shrink at a time: the report's and a put's would tell the controller twice
            leaving = [s for s in self.slaves.values() if self.rules.must_leave(s)]
            if leaving and await self._confirm_without(leaving):
                self._drop(leaving, master_end)

    async def _confirm_without(self, leaving: list[SlaveProgress]) -> bool:
        if self.confirm is None:
            return True
        gone = {s.slave_id for s in leaving}
        return await self.confirm([s.slave_id for s in self.slaves.values() if s.in_sync and s.slave_id not in gone])

    def _drop(self, behind: list[SlaveProgress], offset: int) -> None:
        for slave in behind:
            if slave.in_sync:
                slave.in_sync = False
                log.warning(
                    "slave %d (%s) of %s did not confirm offset %d within %.1f s, or caught up within %.1f s "
                    "(it has %d): out of the in-sync set",
                    slave.slave_id,
                    slave.address,
                    self.broker,
                    offset,
                    self.timeout,
                    self.rules.lag_max,
                    slave.acked,
                )
                self._event("replica_out_of_sync", slave, offset)
        self._wake()

    def _wake(self) -> None:
        if not self._waiters:
            return
        done = self.replicated_to()
        for offset, future in self._waiters:
            if not future.done() and (done is None or done >= offset):
                self._answer(offset)  # now, not when the put resumes: a slave joining meanwhile must have it
                future.set_result(None)

    def _answer(self, offset: int) -> None:
        if self.answered is not None and offset > self.answered:
            self.answered = offset

    def _event(self, name: str, slave: SlaveProgress, master_offset: int) -> None:
        self.events.emit(
            name,
            broker=self.broker,
            slave_id=slave.slave_id,
            slave=slave.address,
            acked_offset=slave.acked,
            master_offset=master_offset,
        )
