"""BroadcastClients: the clients of broadcast groups, and when each was last seen.

Every client of a broadcast group has its own offsets and windows (its owner
is `group@client_id`). A client that went away for good would keep them for
ever; one not seen (no receive) for `idle_ms` is dropped: its windows, its
leases (a late ack is answered as ended) and its offsets, in memory and on
disk. Should it come back, it starts as a new client (the group's consume_from).
Clients known only from stored offsets (after a restart) count as seen at start.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)

DEFAULT_IDLE_MS = 7 * 86_400_000
SWEEP_EVERY_MS = 60_000


def is_client(owner: str) -> bool:
    """A broadcast client's owner (`group@client_id`), not a whole group."""
    return "@" in owner


class BroadcastClients:
    def __init__(self, idle_ms: int = DEFAULT_IDLE_MS) -> None:
        self.idle_ms = idle_ms
        self.last_seen: dict[str, int] = {}
        """owner (`group@client_id`) -> when it last received, ms."""
        self._next_sweep = 0

    def seen(self, owner: str, now_ms: int) -> None:
        self.last_seen[owner] = now_ms

    def gone(self, known: Iterable[str], now_ms: int) -> list[str]:
        """The clients not seen for idle_ms (at most once per sweep interval); `known`: owners with offsets."""
        if now_ms < self._next_sweep:
            return []
        self._next_sweep = now_ms + min(SWEEP_EVERY_MS, max(1, self.idle_ms // 10))
        for owner in known:
            if is_client(owner):
                self.last_seen.setdefault(owner, now_ms)
        cutoff = now_ms - self.idle_ms
        gone = [owner for owner, seen in self.last_seen.items() if seen < cutoff]
        for owner in gone:
            del self.last_seen[owner]
        return gone
