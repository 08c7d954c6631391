"""Where brokers are: master addresses from routes and cluster listings, and topic creation."""

from __future__ import annotations

import asyncio

from gateway.context import GatewayContext
from libs.errors import BrokerUnavailable, PetrelError, ServiceUnavailable
from libs.routing import ClusterListing, TopicRoute
from libs.topic import Perm, TopicConfig
from services.broker.schemas import BrokerTopic


def master_address(route: TopicRoute, broker_name: str) -> str:
    broker = route.broker(broker_name)
    address = broker.master if broker else None
    if address is None:
        raise BrokerUnavailable(f"broker {broker_name} has no live master", broker=broker_name)
    return address


def masters(listing: ClusterListing, cluster: str | None = None) -> list[tuple[str, str]]:
    """(broker name, master address) of every broker, or of one cluster's."""
    return [
        (b.broker_name, i.address)
        for c in listing.clusters
        if cluster is None or c.name == cluster
        for b in c.brokers
        for i in b.instances
        if i.broker_id == 0
    ]


async def create_topic(ctx: GatewayContext, config: TopicConfig) -> list[BrokerTopic]:
    """Create or update the topic on every broker of the gateway's cluster."""
    targets = masters(await ctx.nameservers.clusters(), ctx.settings.cluster)
    if not targets:
        raise ServiceUnavailable(f"no broker of cluster {ctx.settings.cluster!r} is registered with the nameservers")
    results = await asyncio.gather(
        *(ctx.brokers.put_topic(name, address, config) for name, address in targets), return_exceptions=True
    )
    ctx.routes.invalidate(config.name)
    failed = [(name, r) for (name, _), r in zip(targets, results, strict=True) if isinstance(r, BaseException)]
    if failed:
        raise BrokerUnavailable(
            f"topic {config.name!r} could not be written to broker(s) {', '.join(n for n, _ in failed)}: "
            f"{first_detail(failed)}; the call is idempotent, repeat it",
            brokers=[name for name, _ in failed],
        )
    return [r for r in results if isinstance(r, BrokerTopic)]


def default_topic(ctx: GatewayContext, name: str) -> TopicConfig:
    queues = ctx.settings.default_queues
    return TopicConfig(name, queues, queues, Perm.READ_WRITE)


def first_detail(failed: list[tuple[str, BaseException]]) -> str:
    exc = failed[0][1]
    return exc.detail if isinstance(exc, PetrelError) else str(exc)
