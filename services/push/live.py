"""LiveSubscriptions: what the internal API asks of the running deliveries (services.push.dispatcher serves it)."""

from __future__ import annotations

from typing import Protocol

from libs.push_api.schemas import PushAttempt, SubscriptionStatus
from services.push.subscriptions import Subscription


class LiveSubscriptions(Protocol):
    async def apply(self, subscription: Subscription) -> None:
        """After a put, pause, resume or rotation: start, reconfigure or stop the subscription's deliveries."""

    async def remove(self, group: str, topic: str) -> None:
        """After a delete: stop; messages leased and not yet answered are given back to the group."""

    def status(self, subscription: Subscription) -> SubscriptionStatus:
        """The live state: state, in flight, window, rates, counters, last errors."""

    def attempts(self, group: str, topic: str, limit: int) -> list[PushAttempt]:
        """The latest delivery attempts, newest first (none for a subscription not running)."""
