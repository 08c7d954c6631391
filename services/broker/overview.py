"""GET /internal/overview: this broker's part of the cluster's overview (`GET /v1/overview`), from what its lag
sampler last saw (services.broker.lag_history) and its store's disk."""

from __future__ import annotations

import shutil

from fastapi import APIRouter

from libs.broker_api.overview import BrokerOverview, DiskModel, GroupBehind, TopicActivity
from libs.names import is_public_topic
from libs.problem import PROBLEM_RESPONSES
from services.broker.context import Context

router = APIRouter(prefix="/internal", tags=["broker"], responses=PROBLEM_RESPONSES)


@router.get("/overview", operation_id="getBrokerOverview", response_model=BrokerOverview)
async def overview(ctx: Context) -> BrokerOverview:
    """Disk, send and receive rates, each user topic's rate and messages, each group's lag per topic."""
    store = ctx.store
    usage = shutil.disk_usage(store.config.root)
    rates = ctx.lag_history.rates()
    topics = []
    for topic in ctx.topics.all():
        if not is_public_topic(topic.name):
            continue
        held = 0
        for queue in range(topic.read_queues):
            low, high = store.queue_offsets(topic.name, queue)
            held += high - low
        topics.append(TopicActivity(topic=topic.name, send_rate=rates.topics.get(topic.name, 0.0), messages=held))
    return BrokerOverview(
        disk=DiskModel(
            used_bytes=usage.used,
            free_bytes=usage.free,
            total_bytes=usage.total,
            store_bytes=store.commitlog.write_offset - store.commitlog.min_offset,
        ),
        send_rate=rates.send,
        receive_rate=rates.receive,
        topics=topics,
        groups=[GroupBehind(group=g, topics=t) for g, t in sorted(ctx.lag_history.latest().items())],
    )
