"""NameserverClient: asks the configured nameservers, one after another, until one answers; who the masters are.

It starts with a nameserver picked at random (so that clients spread over them) and
keeps the last one that answered; NameserverUnavailable when none did.
"""

from __future__ import annotations

import logging
import random

from libs.errors import NameserverUnavailable, ServiceUnavailable
from libs.http.client import InternalClient
from libs.http.paths import internal_path
from libs.routing import ClusterListing, TopicRoute, TopicRouteList

log = logging.getLogger(__name__)


class NameserverClient:
    def __init__(self, client: InternalClient, nameservers: list[str]) -> None:
        if not nameservers:
            raise ValueError("at least one nameserver address is needed")
        self.client = client
        self.nameservers = list(nameservers)
        self._preferred = random.randrange(len(self.nameservers))

    async def _get(self, path: str) -> object:
        failures: list[str] = []
        for step in range(len(self.nameservers)):
            index = (self._preferred + step) % len(self.nameservers)
            address = self.nameservers[index]
            try:
                answer = await self.client.json("GET", f"http://{address}{path}")
            except ServiceUnavailable as exc:
                failures.append(exc.detail)
                log.warning("nameserver %s did not answer: %s", address, exc.detail)
                continue
            self._preferred = index
            return answer
        raise NameserverUnavailable("no nameserver answered: " + "; ".join(failures))

    async def route(self, topic: str) -> TopicRoute:
        """The topic's route; TopicNotFound when no live broker holds it."""
        return TopicRoute.model_validate(await self._get(internal_path("/internal/routes/{topic}", topic=topic)))

    async def routes(self) -> list[TopicRoute]:
        return TopicRouteList.model_validate(await self._get("/internal/routes")).routes

    async def clusters(self) -> ClusterListing:
        return ClusterListing.model_validate(await self._get("/internal/clusters"))

    async def readers(self, cluster: str | None = None) -> list[tuple[str, str]]:
        """(broker name, address) of every live broker name: its master, else its slave of the lowest id."""
        return readers(await self.clusters(), cluster)

    async def masters(self, cluster: str | None = None) -> list[tuple[str, str]]:
        """(broker name, master address) of every live broker, or of one cluster's."""
        return masters(await self.clusters(), cluster)


def masters(listing: ClusterListing, cluster: str | None = None) -> list[tuple[str, str]]:
    """(broker name, master address) of every broker of the listing, or of one cluster's."""
    return [
        (b.broker_name, master.address)
        for c in listing.clusters
        if cluster is None or c.name == cluster
        for b in c.brokers
        if (master := b.master) is not None
    ]


def readers(listing: ClusterListing, cluster: str | None = None) -> list[tuple[str, str]]:
    """(broker name, address to read from) of every broker name of the listing: the master, else the lowest slave."""
    return [
        (b.broker_name, reader.address)
        for c in listing.clusters
        if cluster is None or c.name == cluster
        for b in c.brokers
        if (reader := b.reader) is not None
    ]
