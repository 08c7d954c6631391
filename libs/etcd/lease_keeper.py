"""LeaseKeeper: keeps one etcd lease alive and says, on this process's monotonic clock, until when it surely holds.

What a master's right to write will rest on (issue 27): it may act on its lease only while
etcd cannot have expired it. etcd counts a lease's TTL from when its leader handles a
keep-alive, which is after the keep-alive was sent, and a new etcd leader renews every lease
in full; so the lease is surely alive until the send time of the last keep-alive etcd
answered, plus the TTL it answered, less a margin for clock rates and scheduling. Counting
from the send, never the answer, is what makes a slow answer safe. The keeper sends a keep-alive
every `interval` (an eighth of the TTL: 250 ms for a master's 2 s), to whichever member answers,
without waiting for the one before: while etcd elects a new raft leader a keep-alive hangs or
is refused for "no leader" and retried, and the next ones go meanwhile, so the first answer
after the election comes as soon as it can. A keep-alive answered then extends the lease from
its own send. With a TTL of 2 s and a margin of 0.5 s, the master's last answered keep-alive
before etcd's leader dies still holds for 1.25 s at least: etcd's raft timers must elect a new
leader within that (deploy.etcd_server's 50/500 ms do, in 0.5 to 1 s). When etcd says the lease
is gone, `lost` is set and the keeper stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from libs.etcd.client import EtcdClient
from libs.etcd.errors import EtcdError, EtcdLeaseNotFound
from libs.etcd.wire import Lease

log = logging.getLogger(__name__)

INTERVAL_FRACTION = 8
"""A keep-alive every TTL / this."""
IN_FLIGHT = 8
"""At most this many keep-alives unanswered at once (etcd unreachable for long: no pile of them)."""


class LeaseKeeper:
    def __init__(
        self,
        client: EtcdClient,
        lease: Lease,
        *,
        granted_at: float,
        margin: float,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`granted_at`: `clock()` when the grant was sent (`grant` below does it right)."""
        if margin >= lease.ttl:
            raise ValueError(f"a margin of {margin} s leaves nothing of a {lease.ttl} s lease")
        self.client = client
        self.lease = lease
        self.margin = margin
        self.interval = interval if interval is not None else lease.ttl / INTERVAL_FRACTION
        self.clock = clock
        self.valid_until = granted_at + lease.ttl - margin
        self.renewals = 0
        self.lost = asyncio.Event()

    @classmethod
    async def grant(
        cls,
        client: EtcdClient,
        ttl: int,
        *,
        margin: float,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> LeaseKeeper:
        """A new lease of `ttl` seconds and its keeper (not yet running: `run` it as a task)."""
        sent = clock()
        lease = await client.grant(ttl)
        return cls(client, lease, granted_at=sent, margin=margin, interval=interval, clock=clock)

    def holds(self) -> bool:
        """True while etcd cannot have expired the lease."""
        return not self.lost.is_set() and self.clock() < self.valid_until

    async def renew(self) -> None:
        """One keep-alive; EtcdLeaseNotFound (and `lost` set) when the lease is gone."""
        sent = self.clock()
        try:
            ttl = await self.client.keep_alive_once(self.lease.id)
        except EtcdLeaseNotFound:
            self.lost.set()
            raise
        self.valid_until = max(self.valid_until, sent + ttl - self.margin)
        self.renewals += 1

    async def run(self) -> None:
        """Renew every `interval` until cancelled or the lease is gone, a keep-alive not waiting for the one before
        (the module's docstring); an unreachable etcd is tried again by the next (the lease may still be alive, and
        `holds` turns false on its own when it may not be)."""
        under_way: set[asyncio.Task[None]] = set()
        try:
            while not self.lost.is_set():
                if len(under_way) < IN_FLIGHT:
                    task = asyncio.create_task(self._renew_once(), name="etcd-keep-alive")
                    under_way.add(task)
                    task.add_done_callback(under_way.discard)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.interval):
                        await self.lost.wait()
            log.warning("etcd lease %x is gone: its holder no longer holds it", self.lease.id)
        finally:
            for task in under_way:
                task.cancel()
            await asyncio.gather(*under_way, return_exceptions=True)

    async def _renew_once(self) -> None:
        try:
            await self.renew()
        except EtcdLeaseNotFound:
            pass  # `lost` is set: run stops
        except EtcdError as exc:
            log.warning("etcd lease %x not renewed (%s); trying again", self.lease.id, exc)
