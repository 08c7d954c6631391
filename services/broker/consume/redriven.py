"""RedrivenMarks: the dead letters a redrive by id sent back, so that the DLQ listing and "redrive all" pass them.

"Redrive all" moves the group's redrive cursor (its consumer offset of the DLQ
queue): what lies before it has left the DLQ. A redrive by id sends messages
anywhere past the cursor; it marks their DLQ offsets here. The marks are
written through at once (a redrive is rare, and a mark is what keeps the
message out of the listing and out of the next "redrive all" after a restart).

A slave copies the marks with its master's consumer offsets (the redrive cursor is one),
every second (services.broker.consumer_mirror), into its own table: a promoted slave
passes what its master redrove. A redrive in the second before a failover may be made
again by the new master: a duplicate after a crash, as the promise allows.

Memory stays bounded: a mark the cursor has passed is dropped, the cursor moves
over the marks right in front of it, and at most `max_marks` are kept per group
(beyond, the oldest are forgotten: those dead letters are listed again and
"redrive all" may send them once more, at least once as ever).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from services.broker.metadata import RedrivenStore

MAX_MARKS = 10_000


class RedrivenMarks:
    def __init__(self, store: RedrivenStore, max_marks: int = MAX_MARKS) -> None:
        self.store = store
        self.max_marks = max_marks
        self._marks: dict[str, set[int]] = {}

    async def load(self) -> None:
        self._marks = await asyncio.to_thread(self.store.load)

    def all(self) -> dict[str, set[int]]:
        return {group: set(marks) for group, marks in self._marks.items()}

    async def mirror(self, marks: dict[str, set[int]]) -> None:
        """Make these marks a slave's copy of its master's (written through, as the master's are)."""
        for group in set(self._marks) | set(marks):
            mine, theirs = self._marks.get(group, set()), marks.get(group, set())
            if mine != theirs:
                await asyncio.to_thread(self.store.change, group, theirs - mine, mine - theirs)
                if theirs:
                    self._marks[group] = set(theirs)
                else:
                    self._marks.pop(group, None)

    def is_marked(self, group: str, dlq_offset: int) -> bool:
        return dlq_offset in self._marks.get(group, ())

    def count_from(self, group: str, cursor: int) -> int:
        return sum(1 for o in self._marks.get(group, ()) if o >= cursor)

    async def mark(self, group: str, dlq_offsets: Iterable[int], cursor: int) -> int:
        """Mark DLQ offsets redriven; answers the cursor moved over the marks right in front of it."""
        marks = self._marks.setdefault(group, set())
        added = {o for o in dlq_offsets if o >= cursor} - marks
        marks |= added
        while cursor in marks:
            cursor += 1
        live = sorted(o for o in marks if o >= cursor)
        forgotten = set(live[: max(0, len(live) - self.max_marks)])
        marks -= forgotten
        await asyncio.to_thread(self.store.change, group, added - forgotten, forgotten)
        return cursor

    async def prune(self, group: str, cursor: int) -> None:
        """Drop the marks before a cursor that is persisted (they are redundant with it)."""
        marks = self._marks.get(group, set())
        passed = {o for o in marks if o < cursor}
        if passed:
            marks -= passed
            await asyncio.to_thread(self.store.change, group, set(), passed)
        if not marks:
            self._marks.pop(group, None)
