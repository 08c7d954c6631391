"""`GET /v1/overview`: the cluster in one answer, for the console's first page and for scripts.

Every broker instance (masters and slaves) says its disk and rates (libs.broker_api.overview);
the topics' rates and messages and the groups' lag come from the masters only (a slave's queues
mirror its master's). A broker that does not answer is listed `alive: false`, never a 5xx.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from pydantic import BaseModel, Field

from gateway.auth.route import AuthorizedRoute
from gateway.cluster.routes import BrokerInstance, get_cluster
from gateway.context import Context
from libs.broker_api.overview import BrokerOverview, DiskModel
from libs.broker_api.replication import BrokerRole

router = APIRouter(prefix="/v1", tags=["cluster"], route_class=AuthorizedRoute)
TOP = 10


class OverviewBroker(BaseModel):
    name: str
    broker_id: int
    address: str
    role: str = Field(description="master or slave (unknown when it did not answer)")
    epoch: int | None
    replication_lag_bytes: int | None = Field(description="a slave: what it lacks of its master's log")
    alive: bool
    disk: DiskModel | None
    send_rate: float = Field(description="messages stored a second (its last sampling interval)")
    receive_rate: float = Field(description="messages consumed a second (acked or handed on)")


class BusyTopic(BaseModel):
    topic: str
    send_rate: float
    messages: int


class TopicLag(BaseModel):
    topic: str
    lag: int


class GroupBehind(BaseModel):
    group: str
    lag: int
    topics: list[TopicLag] = Field(description="the topics it lags on (its retry topic too, while it holds some)")


class Overview(BaseModel):
    brokers: list[OverviewBroker]
    send_rate: float
    receive_rate: float
    topics: int = Field(description="user topics")
    groups: int = Field(description="consumer groups")
    busiest_topics: list[BusyTopic] = Field(description=f"the {TOP} with the highest send rate, then most messages")
    groups_behind: list[GroupBehind] = Field(description=f"the {TOP} groups furthest behind")


@router.get("/overview", operation_id="getOverview", response_model=Overview)
async def get_overview(ctx: Context) -> Overview:
    """Brokers (role, epoch, replication lag, disk, rates), the cluster's send and receive rates, the busiest
    topics and the groups furthest behind, in one answer (rates over the brokers' lag sampling interval)."""
    cluster = await get_cluster(ctx)
    instances = [(b.broker_name, i) for b in cluster.brokers for i in b.instances]
    answers = await asyncio.gather(
        *(ctx.brokers.overview(name, i.address) for name, i in instances), return_exceptions=True
    )
    brokers: list[OverviewBroker] = []
    masters: list[BrokerOverview] = []
    for (name, instance), answer in zip(instances, answers, strict=True):
        seen = answer if isinstance(answer, BrokerOverview) else None
        brokers.append(_broker(name, instance, seen))
        if seen is not None and brokers[-1].role == "master":
            masters.append(seen)
    topics: dict[str, BusyTopic] = {}
    groups: dict[str, dict[str, int]] = {}
    for master in masters:
        for t in master.topics:
            held = topics.setdefault(t.topic, BusyTopic(topic=t.topic, send_rate=0.0, messages=0))
            held.send_rate += t.send_rate
            held.messages += t.messages
        for g in master.groups:
            lags = groups.setdefault(g.group, {})
            for topic, lag in g.topics.items():
                lags[topic] = lags.get(topic, 0) + lag
    behind = [
        GroupBehind(group=g, lag=sum(t.values()), topics=[TopicLag(topic=k, lag=v) for k, v in sorted(t.items()) if v])
        for g, t in groups.items()
    ]
    return Overview(
        brokers=brokers,
        send_rate=sum(m.send_rate for m in masters),
        receive_rate=sum(m.receive_rate for m in masters),
        topics=len(topics),
        groups=len(groups),
        busiest_topics=sorted(topics.values(), key=lambda t: (-t.send_rate, -t.messages, t.topic))[:TOP],
        groups_behind=sorted(behind, key=lambda g: (-g.lag, g.group))[:TOP],
    )


def _broker(name: str, instance: BrokerInstance, seen: BrokerOverview | None) -> OverviewBroker:
    replication = instance.replication
    role = "unknown" if replication is None else "slave" if replication.role is BrokerRole.SLAVE else "master"
    return OverviewBroker(
        name=name,
        broker_id=instance.broker_id,
        address=instance.address,
        role=role,
        epoch=replication.epoch if replication is not None else None,
        replication_lag_bytes=replication.lag_bytes if replication is not None else None,
        alive=instance.reachable and seen is not None,
        disk=seen.disk if seen is not None else None,
        send_rate=seen.send_rate if seen is not None else 0.0,
        receive_rate=seen.receive_rate if seen is not None else 0.0,
    )
