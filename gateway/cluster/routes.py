"""`GET /v1/cluster`: every broker the nameservers know, master and slaves, with its role and replication."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from pydantic import BaseModel, Field

from gateway.auth.route import AuthorizedRoute
from gateway.context import Context
from libs.broker_api.replication import ReplicationStatus
from libs.errors import PetrelError
from libs.routing import BrokerLiveness

router = APIRouter(prefix="/v1", tags=["cluster"], route_class=AuthorizedRoute)


class BrokerInstance(BaseModel):
    broker_id: int = Field(
        description="its id in its broker name (0 is the first master; a controller may promote another)"
    )
    address: str
    reachable: bool = Field(description="it answered the gateway just now")
    replication: ReplicationStatus | None = Field(
        default=None, description="its role, log end, slaves and in-sync set (a master), lag (a slave)"
    )
    problem: str | None = Field(default=None, description="why it did not answer")


class BrokerName(BaseModel):
    cluster: str
    broker_name: str
    master: str | None = Field(description="the master's address; null while it has none")
    instances: list[BrokerInstance]


class ClusterView(BaseModel):
    brokers: list[BrokerName]


@router.get("/cluster", operation_id="getCluster", response_model=ClusterView)
async def get_cluster(ctx: Context) -> ClusterView:
    """Every broker, master and slaves, as its nameservers list it and as it says it stands: role, CommitLog end,
    in-sync set, replication lag in bytes."""
    listing = await ctx.nameservers.clusters()
    names = [(c.name, b.broker_name, b.instances) for c in listing.clusters for b in c.brokers]
    views = await asyncio.gather(
        *(
            asyncio.gather(*(_instance(ctx, i) for i in sorted(found, key=lambda i: i.broker_id)))
            for _, _, found in names
        )
    )
    return ClusterView(
        brokers=[
            BrokerName(
                cluster=cluster,
                broker_name=name,
                master=next((i.address for i in found if i.master), None),
                instances=list(instances),
            )
            for (cluster, name, found), instances in zip(names, views, strict=True)
        ]
    )


async def _instance(ctx: Context, instance: BrokerLiveness) -> BrokerInstance:
    try:
        answer = await ctx.internal.json("GET", f"http://{instance.address}/internal/replication")
    except PetrelError as exc:
        return BrokerInstance(
            broker_id=instance.broker_id, address=instance.address, reachable=False, problem=exc.detail
        )
    return BrokerInstance(
        broker_id=instance.broker_id,
        address=instance.address,
        reachable=True,
        replication=ReplicationStatus.model_validate(answer),
    )
