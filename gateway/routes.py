"""RouteCache: topic routes from the nameservers, kept for `refresh_seconds`.

A route older than that is fetched again on its next use; a caller that met a
routing error (a broker that no longer holds the topic, or does not answer)
calls `invalidate` so the next use fetches at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from libs.nameserver_client import NameserverClient
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

    async def get(self, topic: str) -> TopicRoute:
        cached = self._routes.get(topic)
        if cached is not None and self.clock() - cached.fetched_at < self.refresh_seconds:
            return cached.route
        try:
            route = await self.nameservers.route(topic)
        except Exception:
            self._routes.pop(topic, None)
            raise
        self._routes[topic] = CachedRoute(route, self.clock())
        return route

    def invalidate(self, topic: str) -> None:
        self._routes.pop(topic, None)
