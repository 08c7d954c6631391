"""EndedLeases: why each of the last leases ended, to tell a late ack or nack why its handle is no longer good.

A broker remembers the last ENDED_LEASES_KEPT ended leases (acked, renewed by a visibility change,
failed, reset), the oldest forgotten first. Most end in an ack, and were each kept as an error object
(with its detail, its arguments and its extensions): about 400 bytes a lease, 100 MB for the 200,000
remembered. Here a lease keeps the error's class and its detail, and an ack keeps one shared pair, so
a remembered lease costs its entry and its number; the error is made when a late call asks, a new one
each time (a raised error carries the frames it was raised through).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from libs.errors import AlreadyAcked, LeaseEnded

ENDED_LEASES_KEPT: Final = 200_000
"""How many ended leases are remembered, to tell a late ack why its lease is over."""

Why = tuple[type[LeaseEnded], str]
ACKED: Final[Why] = (AlreadyAcked, "")
"""An ack's reason, shared: its detail names the lease, and is written when asked."""


class EndedLeases:
    def __init__(self, kept: int = ENDED_LEASES_KEPT) -> None:
        self.kept = kept
        self._why: OrderedDict[int, Why] = OrderedDict()

    def end(self, lease: int, kind: type[LeaseEnded] = AlreadyAcked, detail: str = "") -> None:
        """Remember why `lease` ended (an ack unless told otherwise; an ack's detail is written when asked)."""
        why = (kind, detail)
        self._why[lease] = ACKED if why == ACKED else why
        while len(self._why) > self.kept:
            self._why.popitem(last=False)

    def why(self, lease: int) -> LeaseEnded | None:
        """The error a call with this lease's handle gets; None when the lease is not remembered."""
        found = self._why.get(lease)
        if found is None:
            return None
        kind, detail = found
        return kind(detail or f"the message was acked already (lease {lease})")

    def __len__(self) -> int:
        return len(self._why)
