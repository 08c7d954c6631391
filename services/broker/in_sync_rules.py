"""The in-sync rules: when a master's slave joins its in-sync set and when it leaves it.

Kafka's ISR rules with RocketMQ's lag bound: a slave joins once it has written everything the
master has already answered (its high watermark), never before, so a promoted member of the
set never lacks an answered write; it leaves once it has not caught up (written the master's
end as of some moment) for `lag_max` seconds (Kafka's replica.lag.time.max.ms, RocketMQ's
haMaxTimeSlaveNotCatchup), or has said nothing for `silent_max` seconds. A slave that keeps
acknowledging but stays behind thus leaves too, under ASYNC_MASTER as under SYNC_MASTER.

Pure: no I/O and no asyncio, time from the clock given (monotonic in the broker). Where the set
is kept, who must record a shrink first, and the writes waiting on it are services.broker.in_sync's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class SlaveProgress:
    slave_id: int
    address: str
    acked: int = 0
    """Everything below this CommitLog offset is written on the slave (flushed, for a SYNC_FLUSH slave)."""
    heard_at: float = 0.0
    in_sync: bool = False
    caught_up_at: float | None = None
    """When it last had the master's whole log (None: never, in this master's run)."""
    joining: bool = False
    """Caught up lately but short of the high watermark: a SYNC_MASTER's writes wait for it as for a member, so that
    the watermark stops running ahead of it (under a steady load each of its words trails the writes answered since
    it was sent, and it never joined: seen in the nemesis run, 30 s after a heal)."""
    join_failed_at: float | None = None
    """When writes last stopped waiting for it while it was joining: it tries again `lag_max` later, caught up since."""
    ends_seen: deque[tuple[int, float]] = field(default_factory=deque)
    """The master's log end at this slave's earlier words, and when, that its acks have not reached yet: having
    one of those ends now, it was caught up then (those older than the lag bound are forgotten)."""


class InSyncRules:
    def __init__(self, lag_max: float, silent_max: float, clock: Callable[[], float]) -> None:
        self.lag_max = lag_max
        self.silent_max = silent_max
        self.clock = clock

    def heard(self, slave: SlaveProgress, offset: int, master_end: int) -> None:
        """The slave has written everything below `offset`; the master's log ends at `master_end`."""
        now = self.clock()
        # Its word, not the most it ever said: a slave restarted on a log that lost its unflushed tail says less.
        slave.acked, slave.heard_at = offset, now
        seen = slave.ends_seen
        if offset >= master_end:
            slave.caught_up_at = now
            seen.clear()
            return
        # Kafka's rule: under a steady load a slave never has the end of *now*, but having the end the master had
        # at one of its earlier words, it was caught up then. Not only the last word's: its acks trail its stream
        # by a few acks in flight. The ends only grow, so those reached are the oldest ones (amortised O(1)).
        while seen and seen[0][0] <= offset:
            _, then = seen.popleft()
            slave.caught_up_at = then if slave.caught_up_at is None else max(slave.caught_up_at, then)
        while seen and now - seen[0][1] > self.lag_max:  # reached later, it would say "caught up too long ago"
            seen.popleft()
        if seen and seen[-1][0] == master_end:
            seen[-1] = (master_end, now)  # the same end, later: reaching it says more
        else:
            seen.append((master_end, now))

    def may_join(self, slave: SlaveProgress, high_watermark: int) -> bool:
        """Whether a slave outside the set joins: it has every write already answered, and caught up lately."""
        return not slave.in_sync and slave.acked >= high_watermark and not self.lagging(slave)

    def may_start_joining(self, slave: SlaveProgress) -> bool:
        """Whether a slave outside the set, short of the high watermark, is waited for from now on so that it can
        reach it: it caught up lately, and, if a try failed, `lag_max` has passed since and it caught up after it
        (a slave too slow to join holds writes for the replication timeout at most once per `lag_max`)."""
        if slave.in_sync or slave.joining or self.lagging(slave) or self.silent(slave):
            return False
        failed, caught_up = slave.join_failed_at, slave.caught_up_at
        if failed is None:
            return True
        return caught_up is not None and caught_up > failed and self.clock() - failed >= self.lag_max

    def lagging(self, slave: SlaveProgress) -> bool:
        return slave.caught_up_at is None or self.clock() - slave.caught_up_at > self.lag_max

    def silent(self, slave: SlaveProgress) -> bool:
        return self.clock() - slave.heard_at > self.silent_max

    def must_leave(self, slave: SlaveProgress) -> bool:
        """Whether a member of the set leaves it (once the shrink is recorded)."""
        return slave.in_sync and (self.lagging(slave) or self.silent(slave))
