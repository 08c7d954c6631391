"""LongPollGate: how many receives and pulls may wait at once in this gateway.

A waiting poll holds a client connection here and one or more connections to
brokers (the internal client's long-poll pool, which has no per-host limit so
that it never competes with sends, acks and admin calls). The gate bounds them:
past `limit`, a new wait is refused at once with 429 `too-many-long-polls`,
rather than queued behind the others or allowed to exhaust file descriptors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from libs.errors import TooManyLongPolls

DEFAULT_MAX_LONG_POLLS = 4096


class LongPollGate:
    def __init__(self, limit: int = DEFAULT_MAX_LONG_POLLS) -> None:
        self.limit = limit
        self.waiting = 0

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """One long poll for as long as the block lasts; TooManyLongPolls when `limit` already wait."""
        if self.waiting >= self.limit:
            raise TooManyLongPolls(
                f"{self.waiting} long polls are waiting in this gateway, its limit: "
                "ask again shortly, or without a wait",
                limit=self.limit,
            )
        self.waiting += 1
        try:
            yield
        finally:
            self.waiting -= 1
