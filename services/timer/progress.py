"""TimerProgress: how far the timer has read each broker's schedule queues, durably.

Per broker: the next unit to read of each delay-level queue and of the timer
topic, and the broker's small id in TimerStore references. Plus the
cancelled messages (broker, CommitLog offset) not yet past their time. Saved as
one JSON file, written to a temporary file, fsynced and renamed, after the
deliveries it covers: a crash repeats at most what was in flight.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from libs.store.mapped_file import write_atomically


@dataclass
class BrokerCursors:
    store_id: int
    levels: dict[int, int] = field(default_factory=dict)
    timer: int = 0
    starts: dict[str, str] = field(default_factory=dict)
    """topic -> the broker start (incarnation) the cursors of that topic were last checked against."""


WHEEL = -1
"""Where a cancelled exact-time message waits: the timer wheel (a delay level's is its queue id)."""
UNKNOWN = -2
"""Where a cancellation saved before `where` was kept waits."""


class TimerProgress:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.brokers: dict[str, BrokerCursors] = {}
        self.cancelled: set[tuple[str, int]] = set()
        self.cancelled_in: dict[tuple[str, int], int] = {}
        """Where each cancelled message waits: its delay level's queue id, or WHEEL (for the stats)."""

    def load(self) -> None:
        if not self.path.exists():
            return
        state = json.loads(self.path.read_text())
        self.brokers = {
            name: BrokerCursors(
                b["store_id"], {int(q): o for q, o in b["levels"].items()}, b["timer"], b.get("starts", {})
            )
            for name, b in state["brokers"].items()
        }
        self.cancelled = {(broker, int(offset)) for broker, offset, *_ in state["cancelled"]}
        self.cancelled_in = {
            (broker, int(offset)): int(where[0]) for broker, offset, *where in state["cancelled"] if where
        }

    def cancel(self, broker: str, physical_offset: int, where: int) -> bool:
        """Never deliver the message at this offset; False when it was cancelled already."""
        if (broker, physical_offset) in self.cancelled:
            return False
        self.cancelled.add((broker, physical_offset))
        self.cancelled_in[(broker, physical_offset)] = where
        return True

    def waiting_cancelled(self) -> dict[int, int]:
        """Cancelled messages not yet past their time, by where they wait (queue id, or WHEEL)."""
        self.cancelled_in = {key: where for key, where in self.cancelled_in.items() if key in self.cancelled}
        counts: dict[int, int] = {}
        for where in self.cancelled_in.values():
            counts[where] = counts.get(where, 0) + 1
        return counts

    def cursors(self, broker: str) -> BrokerCursors:
        cursors = self.brokers.get(broker)
        if cursors is None:
            cursors = BrokerCursors(store_id=len(self.brokers))
            self.brokers[broker] = cursors
        return cursors

    def broker_of(self, store_id: int) -> str | None:
        return next((name for name, c in self.brokers.items() if c.store_id == store_id), None)

    def save(self) -> None:
        state = {
            "brokers": {
                name: {
                    "store_id": c.store_id,
                    "levels": {str(q): o for q, o in c.levels.items()},
                    "timer": c.timer,
                    "starts": c.starts,
                }
                for name, c in self.brokers.items()
            },
            "cancelled": sorted(
                [broker, offset, self.cancelled_in.get((broker, offset), UNKNOWN)] for broker, offset in self.cancelled
            ),
        }
        write_atomically(self.path, json.dumps(state).encode())
