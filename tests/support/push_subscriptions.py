"""The push service's subscriptions API for tests: its router over a real store, with recorded live deliveries.

`RecordingLive` stands in for the delivery engine (services.push.dispatcher):
it records what the API asks of it (apply, remove) and answers a status that
follows the stored subscription. `subscriptions_app` serves `services.push.api`
with it, a SubscriptionStore on the database at `database_url`, and an egress
guard whose resolver knows the hosts in `HOSTS` and nothing else.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from fastapi import FastAPI

from libs.egress import EgressGuard
from libs.http.app import add_routers, register_schemas, service_app
from libs.push_api.schemas import PushAttempt, SubscriptionState, SubscriptionStatus
from services.push import api
from services.push.settings import PushSettings
from services.push.subscriptions import Subscription, SubscriptionStore, open_subscription_engine

INSIDE = {
    "internal.example.com": ["10.1.2.3"],
    "split.example.com": ["93.184.216.34", "192.168.0.7"],
    "alibaba-metadata.example.com": ["100.100.100.200"],
    "oracle-metadata.example.com": ["192.0.0.192"],
    "site-local.example.com": ["fec0::1"],
    "sixtofour.example.com": ["2002:a00:1::1"],
    "nat64.example.com": ["64:ff9b::a9fe:a9fe"],
}
"""Hosts with an address the egress guard refuses: private, half private, and what Python calls global."""
HOSTS = {"hooks.example.com": ["93.184.216.34"]} | INSIDE
"""What the test resolver answers: public, and inside."""


def resolve(host: str, port: int) -> Sequence[str]:
    if host not in HOSTS:
        raise OSError(f"[Errno -2] Name or service not known: {host}")
    return HOSTS[host]


@dataclass
class RecordingLive:
    applied: list[Subscription] = field(default_factory=list)
    removed: list[tuple[str, str]] = field(default_factory=list)
    recent: list[PushAttempt] = field(default_factory=list)
    """what `attempts` answers (newest first), for every subscription"""

    async def apply(self, subscription: Subscription) -> None:
        self.applied.append(subscription)

    async def remove(self, group: str, topic: str) -> None:
        self.removed.append((group, topic))

    def status(self, subscription: Subscription) -> SubscriptionStatus:
        state = SubscriptionState.ACTIVE
        if subscription.disabled_reason is not None:
            state = SubscriptionState.DISABLED
        elif subscription.paused:
            state = SubscriptionState.PAUSED
        return SubscriptionStatus(
            state=state,
            in_flight=0,
            window=subscription.max_in_flight,
            deliveries_per_second=0.0,
            acked=0,
            deferred=0,
            failed=0,
            throttled=0,
            last_errors=[],
        )

    def attempts(self, group: str, topic: str, limit: int) -> list[PushAttempt]:
        return self.recent[:limit]


def subscriptions_app(database_url: str, live: RecordingLive) -> tuple[FastAPI, SubscriptionStore]:
    """The internal subscriptions API, and the store it writes (for the test to look at)."""
    engine = open_subscription_engine(database_url)
    store = SubscriptionStore(engine)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, object]]:
        try:
            yield {"store": store, "live": live, "egress": EgressGuard((), resolve)}
        finally:
            engine.dispose()

    app = service_app("push", PushSettings(), lifespan=lifespan)
    add_routers(app, api.router)
    register_schemas(app, list(api.REQUEST_BODIES))
    return app, store
