"""Deliveries: the running Dispatchers, one per delivering subscription (LiveSubscriptions for the API).

Started for every stored subscription that is neither paused nor disabled
when the service starts; after each change through the API, `apply` starts,
reconfigures, restarts (a new endpoint) or stops the subscription's Dispatcher.
A stopped subscription keeps its attempt log, so `/attempts` still shows why
it was disabled.
"""

from __future__ import annotations

import asyncio
import logging

from libs.broker_api.receiver import Receiver
from libs.egress import EgressGuard
from libs.events.writer import EventWriter
from libs.push_api.schemas import PushAttempt, SubscriptionState, SubscriptionStatus
from services.push.attempts import AttemptLog, Outcome
from services.push.delivery import Endpoint
from services.push.dispatcher import Dispatcher
from services.push.leases import GroupLeases
from services.push.settings import PushSettings
from services.push.subscriptions import Subscription, SubscriptionStore

log = logging.getLogger(__name__)

Key = tuple[str, str]


class Deliveries:
    def __init__(
        self,
        settings: PushSettings,
        store: SubscriptionStore,
        receiver: Receiver,
        leases: GroupLeases,
        guard: EgressGuard,
        events: EventWriter,
    ) -> None:
        self.settings = settings
        self.store = store
        self.receiver = receiver
        self.leases = leases
        self.guard = guard
        self.events = events
        self.running: dict[Key, Dispatcher] = {}
        self.logs: dict[Key, AttemptLog] = {}
        self._lock = asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        for subscription in await asyncio.to_thread(self.store.list):
            await self.apply(subscription)

    async def close(self) -> None:
        async with self._lock:
            running, self.running = list(self.running.values()), {}
        await asyncio.gather(*(d.stop() for d in running), return_exceptions=True)
        await asyncio.gather(*self._background, return_exceptions=True)

    async def apply(self, subscription: Subscription) -> None:
        async with self._lock:
            current = self.running.get(subscription.key)
            if current is not None and subscription.delivering and _same_endpoint(current.subscription, subscription):
                current.reconfigure(subscription)
                return
            if current is not None:
                del self.running[subscription.key]
                await current.stop()
            if subscription.delivering:
                self.running[subscription.key] = self._dispatcher(subscription)
                self.running[subscription.key].start()

    async def remove(self, group: str, topic: str) -> None:
        async with self._lock:
            current = self.running.pop((group, topic), None)
            self.logs.pop((group, topic), None)
        if current is not None:
            await current.stop()

    def status(self, subscription: Subscription) -> SubscriptionStatus:
        running = self.running.get(subscription.key)
        if running is not None:
            return running.status()
        attempts = self.logs.get(subscription.key)
        counts = attempts.counts if attempts is not None else None
        return SubscriptionStatus(
            state=_resting_state(subscription),
            in_flight=0,
            window=0,
            deliveries_per_second=attempts.per_second() if attempts else 0.0,
            acked=counts[Outcome.ACKED] if counts else 0,
            deferred=counts[Outcome.DEFERRED] if counts else 0,
            failed=counts[Outcome.FAILED] if counts else 0,
            throttled=counts[Outcome.THROTTLED] if counts else 0,
            last_errors=attempts.errors() if attempts else [],
        )

    def attempts(self, group: str, topic: str, limit: int) -> list[PushAttempt]:
        found = self.logs.get((group, topic))
        return found.attempts(limit) if found is not None else []

    def _dispatcher(self, subscription: Subscription) -> Dispatcher:
        attempts = self.logs.get(subscription.key)
        if attempts is None or attempts.endpoint_url != subscription.endpoint_url:
            attempts = self.logs[subscription.key] = AttemptLog(
                subscription.group, subscription.endpoint_url, self.events, self.settings.attempts_kept
            )
        endpoint = Endpoint(
            subscription.endpoint_url,
            self.guard,
            max_connections=subscription.max_in_flight,
            max_answer_bytes=self.settings.max_answer_bytes,
        )
        return Dispatcher(subscription, self.settings, self.receiver, self.leases, endpoint, attempts, self._gone)

    async def _gone(self, subscription: Subscription, answer: str) -> None:
        """The endpoint answered 410 Gone: disable the subscription (stopped by a task of its own: the caller is
        one of the deliveries that stopping waits for)."""
        reason = f"the endpoint answered {answer}"
        log.warning("push %s disabled: %s", subscription.key, reason)
        disabled = await asyncio.to_thread(self.store.disable, subscription.group, subscription.topic, reason)
        task = asyncio.create_task(self.apply(disabled))
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _same_endpoint(old: Subscription, new: Subscription) -> bool:
    return old.endpoint_url == new.endpoint_url and old.max_in_flight == new.max_in_flight


def _resting_state(subscription: Subscription) -> SubscriptionState:
    if subscription.disabled_reason is not None:
        return SubscriptionState.DISABLED
    return SubscriptionState.PAUSED if subscription.paused else SubscriptionState.ACTIVE
