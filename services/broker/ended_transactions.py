"""EndedTransactions: the outcomes of ended transactions, the newest in memory, every one on disk.

An end is answered from here: a repeat of it (the same outcome) as already
ended, a conflicting one refused. A month of transactions would not fit in a
dict, so memory keeps only the newest `kept` outcomes; an older one is looked
up in the op queue through the index (every op record carries its message id
as a key), which is where it was recorded in the first place. Op records
written before they carried a key cannot be looked up: those read at start
stay in memory whatever the bound (they are a fixed number, never more).

Memory lets go of outcomes a slice at a time (a sixteenth of the bound past it)
and says so (`evicted`): until the next slice, every outcome recorded since the
last one is held, which lets an end whose half message is newer than that
answer from memory alone (services.broker.transactions, issue 29).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

Outcome = TypeVar("Outcome")

ENDED_KEPT = 100_000
"""Ended transactions remembered in memory; older ones are read back from the op queue."""


class EndedTransactions(Generic[Outcome]):
    """message id -> outcome, as a dict reads it; a lookup of an id no longer held asks `recorded`."""

    def __init__(
        self,
        recorded: Callable[[str], Outcome | None],
        kept: int = ENDED_KEPT,
        evicted: Callable[[], None] | None = None,
    ) -> None:
        self.recorded = recorded
        self.kept = kept
        self.evicted = evicted
        """Called after memory let go of some outcomes."""
        self._slack = kept // 16
        self._held: OrderedDict[str, Outcome] = OrderedDict()
        """Subject to the bound, oldest first."""
        self._keyless: dict[str, Outcome] = {}
        """Read at start from op records without a key: not bounded, never more than there were."""

    def __setitem__(self, message_id: str, outcome: Outcome) -> None:
        self._held[message_id] = outcome
        self._held.move_to_end(message_id)
        if len(self._held) > self.kept + self._slack:
            while len(self._held) > self.kept:
                self._held.popitem(last=False)
            if self.evicted is not None:
                self.evicted()

    def keep_for_ever(self, message_id: str, outcome: Outcome) -> None:
        """An outcome that cannot be looked up on disk (an op record written without its key)."""
        self._keyless[message_id] = outcome

    def get(self, message_id: str) -> Outcome | None:
        held = self.held(message_id)
        return held if held is not None else self.recorded(message_id)

    def held(self, message_id: str) -> Outcome | None:
        """The outcome if memory holds it (never read back from disk)."""
        return self._held.get(message_id) or self._keyless.get(message_id)

    def __getitem__(self, message_id: str) -> Outcome:
        outcome = self.get(message_id)
        if outcome is None:
            raise KeyError(message_id)
        return outcome

    def __contains__(self, message_id: str) -> bool:
        return self.get(message_id) is not None

    def pop(self, message_id: str, default: Outcome | None = None) -> Outcome | None:
        """Forget an outcome whose op record was not stored."""
        return self._held.pop(message_id, default)

    def __len__(self) -> int:
        """How many are held in memory."""
        return len(self._held) + len(self._keyless)
