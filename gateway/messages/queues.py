"""`/v1` queue offsets: where one queue of a topic begins and ends, and where it holds messages from a time on.

A reader that starts a queue at its beginning asks here first: a queue that retention
trimmed no longer starts at offset 0, and a pull there is answered 416 offset-out-of-range.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gateway.auth.route import AuthorizedRoute
from gateway.cluster.writes import read_address
from gateway.context import Context
from gateway.edge.params import QueueId, ReadableTopic
from gateway.messages.schemas import QueueOffsets
from libs.errors import (
    BrokerUnavailable,
    InvalidRequest,
    InvalidTopicName,
    QueueNotFound,
    ReservedTopicName,
    TopicNotFound,
    ValidationFailed,
)
from libs.problem import problem_responses
from libs.routing import TopicRoute

router = APIRouter(prefix="/v1", tags=["messages"], route_class=AuthorizedRoute)


@router.get(
    "/topics/{topic}/queues/{queue_id}/offsets",
    operation_id="getQueueOffsets",
    response_model=QueueOffsets,
    responses=problem_responses(
        InvalidTopicName,
        ReservedTopicName,
        InvalidRequest,
        TopicNotFound,
        QueueNotFound,
        ValidationFailed,
        BrokerUnavailable,
    ),
)
async def get_queue_offsets(
    ctx: Context,
    topic: ReadableTopic,
    queue_id: QueueId,
    timestamp: Annotated[
        int | None, Query(ge=0, description="epoch ms: also answer the first offset stored at or after it")
    ] = None,
    broker: Annotated[str | None, Query(description="the broker, when several hold the topic")] = None,
) -> QueueOffsets:
    """One queue's first and next offsets (min_offset and max_offset: a pull reads [min_offset, max_offset)).

    With `timestamp`, `offset_for_timestamp` is the first offset stored at or after it
    (max_offset when none is yet). A user topic's: system topics are refused (400 reserved-topic-name).
    """
    route = await ctx.routes.get(topic)
    name, address = pick_broker(route, broker)
    found = await ctx.brokers.queue_offsets(name, address, topic, queue_id, timestamp)
    return QueueOffsets(
        topic=topic,
        queue_id=queue_id,
        broker=name,
        min_offset=found.min_offset,
        max_offset=found.max_offset,
        offset_for_timestamp=found.offset_for_timestamp,
    )


def pick_broker(route: TopicRoute, broker: str | None) -> tuple[str, str]:
    """The broker a read of one queue names (the only one, when `broker` is None) and where its read goes."""
    names = [q.broker_name for q in route.queues]
    if broker is None:
        if len(names) > 1:
            raise InvalidRequest(
                f"topic {route.topic!r} has queues on {', '.join(names)}: say which with ?broker=", brokers=names
            )
        broker = names[0]
    if broker not in names:
        raise TopicNotFound(f"broker {broker!r} holds no queue of {route.topic!r} (brokers: {', '.join(names)})")
    return broker, read_address(route, broker)
