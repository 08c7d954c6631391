"""AttemptLog: one subscription's recent delivery attempts, its counters and rate, and the `push_attempt` events.

Kept in memory since the push service started: the recent attempts (a bounded
ring, newest first in answers), the latest errors, counts by outcome and the
attempts of the last minute (the rate). Every attempt is also written as a
`push_attempt` lifecycle event, which the nightly ETL rolls into `push_hourly`.
"""

from __future__ import annotations

import collections
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from libs.events.writer import EventWriter
from libs.push_api.schemas import PushAttempt, PushError

ERRORS_KEPT: Final = 10
RATE_WINDOW_SECONDS: Final = 60.0


class Outcome(enum.StrEnum):
    ACKED = "acked"
    """2xx: the message is consumed"""
    DEFERRED = "deferred"
    """202 with Petrel-Ack: deferred: the receiver acks or nacks later with the handle"""
    FAILED = "failed"
    """4xx (but 410 and 429), 500, 501, ...: a failed attempt of the message (nacked)"""
    THROTTLED = "throttled"
    """429, 502, 503, 504, no answer in time, no connection: the endpoint's trouble, not counted"""
    GONE = "gone"
    """410 Gone: the subscription is disabled"""
    LOST = "lost"
    """the lease ended before the message could be delivered (the group delivers it again)"""


@dataclass(frozen=True, slots=True)
class Attempt:
    at_ms: int
    message_id: str
    topic: str
    delivery_attempt: int
    outcome: Outcome
    status: int | None
    latency_ms: int
    error: str | None = None


def endpoint_label(url: str) -> str:
    """The URL without its query and fragment (which may carry a token): what events and logs name."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


class AttemptLog:
    def __init__(
        self,
        group: str,
        endpoint_url: str,
        events: EventWriter,
        kept: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.group = group
        self.endpoint_url = endpoint_url
        self.endpoint = endpoint_label(endpoint_url)
        self.events = events
        self.clock = clock
        self.counts: collections.Counter[Outcome] = collections.Counter()
        self._recent: collections.deque[Attempt] = collections.deque(maxlen=kept)
        self._errors: collections.deque[PushError] = collections.deque(maxlen=ERRORS_KEPT)
        self._times: collections.deque[float] = collections.deque()
        self.last_throttled_at: float | None = None
        self.last_answered_at: float | None = None
        """the last attempt the endpoint answered (anything but throttled)"""

    def record(self, attempt: Attempt) -> None:
        self.counts[attempt.outcome] += 1
        self._recent.append(attempt)
        now = self.clock()
        self._times.append(now)
        if attempt.outcome is Outcome.THROTTLED:
            self.last_throttled_at = now
        elif attempt.outcome is not Outcome.LOST:
            self.last_answered_at = now
        if attempt.outcome in (Outcome.FAILED, Outcome.THROTTLED, Outcome.GONE, Outcome.LOST):
            error = attempt.error or f"HTTP {attempt.status}"
            self._errors.append(
                PushError(at=attempt.at_ms, message_id=attempt.message_id, status=attempt.status, error=error)
            )
        fields: dict[str, object] = {}
        if attempt.error:
            fields["error"] = attempt.error
        self.events.emit(
            "push_attempt",
            message_id=attempt.message_id,
            topic=attempt.topic,
            group=self.group,
            endpoint=self.endpoint,
            status=attempt.status,
            latency_ms=attempt.latency_ms,
            outcome=attempt.outcome.value,
            delivery_attempt=attempt.delivery_attempt,
            **fields,
        )

    def in_trouble(self) -> bool:
        """Whether the endpoint's latest answer was a throttling one (no answer since)."""
        throttled, answered = self.last_throttled_at, self.last_answered_at
        return throttled is not None and (answered is None or throttled > answered)

    def note_error(self, error: str) -> None:
        """A failure that is no delivery attempt (the brokers did not answer a receive): shown with the errors."""
        self._errors.append(PushError(at=int(self.clock() * 1000), message_id="", status=None, error=error))

    def per_second(self) -> float:
        """Attempts per second over the last minute."""
        horizon = self.clock() - RATE_WINDOW_SECONDS
        while self._times and self._times[0] < horizon:
            self._times.popleft()
        return round(len(self._times) / RATE_WINDOW_SECONDS, 3)

    def attempts(self, limit: int) -> list[PushAttempt]:
        newest = list(self._recent)[-limit:][::-1]
        return [
            PushAttempt(
                at=a.at_ms,
                message_id=a.message_id,
                delivery_attempt=a.delivery_attempt,
                outcome=a.outcome.value,
                status=a.status,
                latency_ms=a.latency_ms,
                error=a.error,
            )
            for a in newest
        ]

    def errors(self) -> list[PushError]:
        return list(self._errors)[::-1]
