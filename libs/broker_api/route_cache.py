"""RouteCache and MasterDirectory: what the nameservers say, kept for `refresh_seconds`.

A route older than that is fetched again on its next use; a caller that met a
routing error (a broker that no longer holds the topic, or does not answer)
calls `invalidate` so the next use fetches at once.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from libs.broker_api.nameservers import NameserverClient
from libs.routing import TopicRoute


@dataclass(frozen=True, slots=True)
class CachedRoute:
    route: TopicRoute
    fetched_at: float


class RouteCache:
    def __init__(
        self, nameservers: NameserverClient, refresh_seconds: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.nameservers = nameservers
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self._routes: dict[str, CachedRoute] = {}
        self._fetching: dict[str, asyncio.Future[TopicRoute]] = {}
        """Fetches under way: the requests that miss the cache at once share one (hundreds of polls, one call)."""

    async def get(self, topic: str) -> TopicRoute:
        cached = self._routes.get(topic)
        if cached is not None and self.clock() - cached.fetched_at < self.refresh_seconds:
            return cached.route
        fetching = self._fetching.get(topic)
        if fetching is None:
            fetching = self._fetching[topic] = asyncio.ensure_future(self._fetch(topic))
            fetching.add_done_callback(lambda done: self._fetched(topic, done))
        return await asyncio.shield(fetching)  # a caller that goes away does not cancel the others' fetch

    def _fetched(self, topic: str, done: asyncio.Future[TopicRoute]) -> None:
        if self._fetching.get(topic) is done:
            del self._fetching[topic]
        if not done.cancelled():
            done.exception()  # retrieved: the callers (if any are left) raise it

    async def _fetch(self, topic: str) -> TopicRoute:
        try:
            route = await self.nameservers.route(topic)
        except Exception:
            self._routes.pop(topic, None)
            raise
        self._routes[topic] = CachedRoute(route, self.clock())
        return route

    def invalidate(self, topic: str) -> None:
        self._routes.pop(topic, None)

    def invalidate_broker(self, broker_name: str) -> None:
        """Every cached route with a queue on `broker_name` (its master was replaced): fetched again on its next use."""
        for topic, cached in list(self._routes.items()):
            if cached.route.broker(broker_name) is not None:
                del self._routes[topic]


class MasterDirectory:
    """Broker name -> its master's address, from the nameservers' cluster listing.

    Acks name their broker in the receipt handle, not a topic, so they are routed
    by broker. The listing is kept for `refresh_seconds`; a name it lacks fetches
    it again, at most once per `miss_seconds`, so forged names cannot flood the
    nameservers.
    """

    def __init__(
        self,
        nameservers: NameserverClient,
        refresh_seconds: float,
        miss_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nameservers = nameservers
        self.refresh_seconds = refresh_seconds
        self.miss_seconds = miss_seconds
        self.clock = clock
        self._masters: dict[str, str] = {}
        self._fetched_at = -math.inf
        self._fetching = asyncio.Lock()
        """Lookups that miss at once share one listing (a burst of commits or acks, one call)."""

    async def lookup(self, names: Iterable[str], max_age_s: float | None = None) -> dict[str, str]:
        """The master address of each named broker that is registered (the unknown ones are left out).

        `max_age_s`: a listing older than this is fetched again (a put stalled on a master asks whether it was
        replaced), rather than after `refresh_seconds`."""
        wanted = set(names)
        if self._stale(wanted, max_age_s):
            async with self._fetching:
                if self._stale(wanted, max_age_s):  # not fetched by the lookup this one waited behind
                    self._masters = dict(await self.nameservers.masters())
                    self._fetched_at = self.clock()
        return {name: self._masters[name] for name in wanted if name in self._masters}

    def _stale(self, wanted: set[str], max_age_s: float | None = None) -> bool:
        age = self.clock() - self._fetched_at
        if max_age_s is not None and age >= max_age_s:
            return True
        return age >= self.refresh_seconds or (age >= self.miss_seconds and not wanted <= self._masters.keys())
