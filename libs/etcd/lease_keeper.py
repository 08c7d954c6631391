"""LeaseKeeper: keeps one etcd lease alive and says, on this process's monotonic clock, until when it surely holds.

What a master's right to write will rest on (issue 27): it may act on its lease only while
etcd cannot have expired it. etcd counts a lease's TTL from when its leader handles a
keep-alive, which is after the keep-alive was sent, and a new etcd leader renews every lease
in full; so the lease is surely alive until the send time of the last keep-alive etcd
answered, plus the TTL it answered, less a margin for clock rates and scheduling. Counting
from the send, never the answer, is what makes a slow answer safe. The keeper renews every
`interval` (a third of the TTL, as etcd's own clients do), from whichever member answers;
when etcd says the lease is gone, `lost` is set and the keeper stops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from libs.etcd.client import EtcdClient
from libs.etcd.errors import EtcdError, EtcdLeaseNotFound
from libs.etcd.wire import Lease

log = logging.getLogger(__name__)


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
        self.interval = interval if interval is not None else lease.ttl / 3
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
        """Renew until cancelled or the lease is gone; an unreachable etcd is tried again at the next interval (the
        lease may still be alive, and `holds` turns false on its own when it may not be)."""
        while True:
            try:
                await self.renew()
            except EtcdLeaseNotFound:
                log.warning("etcd lease %x is gone: its holder no longer holds it", self.lease.id)
                return
            except EtcdError as exc:
                log.warning("etcd lease %x not renewed (%s); trying again", self.lease.id, exc)
            await asyncio.sleep(self.interval)
