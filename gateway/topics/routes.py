"""`/v1/topics`: create, update, list, describe and delete topics."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Body, Header, Query, Request, Response

from gateway.auth.needs import ADMIN, NEEDS, SUB
from gateway.auth.principal import principal_of
from gateway.auth.route import AuthorizedRoute
from gateway.cluster.writes import (
    QueueHeld,
    change_topic,
    create_only_of,
    first_detail,
    master_address,
    queues_not_empty,
)
from gateway.context import Context, GatewayContext
from gateway.edge.params import AnyTopic, UserTopic
from gateway.topics.schemas import Topic, TopicList, TopicOnBroker, TopicQueue, TopicSpec, TopicSummary
from libs.broker_api.schemas import BrokerTopic
from libs.errors import (
    AlreadyExists,
    BrokerUnavailable,
    InvalidTopicName,
    MalformedBody,
    QueuesNotEmpty,
    ReservedTopicName,
    ServiceUnavailable,
    TopicNotFound,
    ValidationFailed,
)
from libs.names import is_system_topic
from libs.problem import problem_responses
from libs.routing import TopicRoute
from libs.topic import Perm, TopicConfig

router = APIRouter(prefix="/v1/topics", tags=["topics"], route_class=AuthorizedRoute)


@router.put(
    "/{topic}",
    operation_id="putTopic",
    response_model=Topic,
    responses={
        201: {"model": Topic, "description": "Created"},
        **problem_responses(
            InvalidTopicName, ReservedTopicName, MalformedBody, ValidationFailed, QueuesNotEmpty, AlreadyExists
        ),
    },
)
async def put_topic(
    ctx: Context,
    topic: UserTopic,
    response: Response,
    spec: Annotated[TopicSpec, Body(default_factory=TopicSpec)],
    if_none_match: Annotated[str | None, Header(description="*: create only (412 when the topic exists)")] = None,
) -> Topic:
    """Create the topic on every broker of the cluster (201), or change only the fields named (200).

    Fields absent keep their value (on create, their defaults). Fewer queues are refused (409
    queues-not-empty, nothing changed) while a queue to be removed holds any message within
    retention, on any broker. `If-None-Match: *` makes it create-only (412 already-exists).
    """
    create_only = create_only_of(if_none_match)
    current = await _current(ctx, topic)
    if current is not None and spec.queues is not None and not create_only:
        await _refuse_hiding(ctx, current.route, spec.queues)
    stored = await change_topic(
        ctx,
        topic,
        queues=spec.queues,
        message_type=spec.message_type,
        current=current.config if current else None,
        create_only=create_only,
    )
    response.status_code = 201 if any(r.created for r in stored) else 200
    return _describe(topic, stored[0].to_config(), stored, [])


@router.get("", operation_id="listTopics", response_model=TopicList, responses=problem_responses(ValidationFailed))
async def list_topics(
    ctx: Context,
    request: Request,
    include_system: Annotated[bool, Query(description="also list Petrel's system topics")] = False,
) -> TopicList:
    """Every topic a live broker holds that the key may describe (getTopic's check)."""
    principal = principal_of(request)
    (describe,) = NEEDS["getTopic"]
    summaries = [
        _summary(route)
        for route in await ctx.nameservers.routes()
        if (include_system or not is_system_topic(route.topic))
        and principal.may(*describe.resource({"topic": route.topic}))
    ]
    return TopicList(topics=summaries)


@router.get(
    "/{topic}",
    operation_id="getTopic",
    response_model=Topic,
    response_model_exclude_none=True,
    responses=problem_responses(InvalidTopicName, TopicNotFound),
)
async def get_topic(ctx: Context, topic: AnyTopic, request: Request) -> Topic:
    """The topic's type and its queues on each broker; with each queue's min and max offset for a key that may
    subscribe to or administer the topic (what a pull of the queue would start from and end at)."""
    offsets = principal_of(request).may((SUB, ADMIN), "topic", topic)
    for attempt in range(2):
        route = await ctx.routes.get(topic)
        try:
            return await _describe_route(ctx, topic, route, offsets=offsets)
        except TopicNotFound:
            # A broker no longer holds what the cached route says: refresh once.
            ctx.routes.invalidate(topic)
            if attempt:
                raise
    raise AssertionError("unreachable")


@router.delete(
    "/{topic}",
    operation_id="deleteTopic",
    status_code=204,
    responses=problem_responses(InvalidTopicName, ReservedTopicName, TopicNotFound),
)
async def delete_topic(ctx: Context, topic: UserTopic) -> Response:
    """Delete the topic from every broker that holds it."""
    ctx.routes.invalidate(topic)
    route = await ctx.routes.get(topic)
    targets = [(q.broker_name, master_address(route, q.broker_name)) for q in route.queues]
    results = await asyncio.gather(
        *(ctx.brokers.delete_topic(name, address, topic) for name, address in targets), return_exceptions=True
    )
    ctx.routes.invalidate(topic)
    failed = [
        (name, r)
        for (name, _), r in zip(targets, results, strict=True)
        if isinstance(r, BaseException) and not isinstance(r, TopicNotFound)
    ]
    if failed:
        raise BrokerUnavailable(
            f"topic {topic!r} is still on {', '.join(n for n, _ in failed)}: {first_detail(failed)}"
        )
    return Response(status_code=204)


@dataclass(frozen=True, slots=True)
class _Current:
    route: TopicRoute
    config: TopicConfig


async def _current(ctx: GatewayContext, topic: str) -> _Current | None:
    """The topic as its route says now (not a cached one), or None when no broker holds it."""
    ctx.routes.invalidate(topic)
    try:
        route = await ctx.routes.get(topic)
    except TopicNotFound:
        return None
    first = route.queues[0]
    return _Current(route, TopicConfig(topic, first.read_queues, first.write_queues, first.perm, first.message_type))


async def _refuse_hiding(ctx: GatewayContext, route: TopicRoute, queues: int) -> None:
    """QueuesNotEmpty naming every broker's queues beyond `queues` that hold messages (each broker checks again
    when it is written, atomically with its sends: this one spares a shrink half done across brokers)."""
    shrinking = [q.broker_name for q in route.queues if max(q.read_queues, q.write_queues) > queues]
    answers = await asyncio.gather(
        *(ctx.brokers.topic_offsets(name, master_address(route, name), route.topic) for name in shrinking)
    )
    held = [
        QueueHeld(broker=name, queue_id=queue_id, messages=high - low)
        for name, offsets in zip(shrinking, answers, strict=True)
        for queue_id, (low, high) in sorted(offsets.ranges().items())
        if queue_id >= queues and high > low
    ]
    if held:
        raise queues_not_empty(route.topic, held)


async def _describe_route(ctx: GatewayContext, topic: str, route: TopicRoute, *, offsets: bool = False) -> Topic:
    async def fetch(broker_name: str) -> tuple[BrokerTopic, dict[int, tuple[int, int]]] | None:
        address = master_address(route, broker_name)
        try:
            if not offsets:
                return await ctx.brokers.get_topic(broker_name, address, topic), {}
            found, ranges = await asyncio.gather(
                ctx.brokers.get_topic(broker_name, address, topic),
                ctx.brokers.topic_offsets(broker_name, address, topic),
            )
        except ServiceUnavailable:
            return None
        return found, ranges.ranges()

    answers = await asyncio.gather(*(fetch(q.broker_name) for q in route.queues))
    stored = [a[0] for a in answers if a is not None]
    ranges = {a[0].broker_name: a[1] for a in answers if a is not None}
    missing = [q.broker_name for q, a in zip(route.queues, answers, strict=True) if a is None]
    first = route.queues[0]
    config = TopicConfig(topic, first.read_queues, first.write_queues, first.perm, first.message_type)
    return _describe(topic, stored[0].to_config() if stored else config, stored, missing, ranges)


def _describe(
    topic: str,
    config: TopicConfig,
    stored: list[BrokerTopic],
    unavailable: list[str],
    ranges: dict[str, dict[int, tuple[int, int]]] | None = None,
) -> Topic:
    """`ranges`: broker -> queue id -> (min offset, max offset), where they were read."""
    brokers = [
        TopicOnBroker(
            broker=b.broker_name,
            available=True,
            queues=[
                TopicQueue(
                    queue_id=q,
                    readable=bool(b.perm & Perm.READ) and q < b.read_queues,
                    writable=bool(b.perm & Perm.WRITE) and q < b.write_queues,
                    min_offset=span[0] if (span := (ranges or {}).get(b.broker_name, {}).get(q)) else None,
                    max_offset=span[1] if span else None,
                )
                for q in range(max(b.read_queues, b.write_queues))
            ],
        )
        for b in stored
    ] + [TopicOnBroker(broker=name, available=False, queues=[]) for name in unavailable]
    return Topic(
        topic=topic,
        message_type=config.message_type,
        queues=sum(len(b.queues) for b in brokers),
        brokers=sorted(brokers, key=lambda b: b.broker),
    )


def _summary(route: TopicRoute) -> TopicSummary:
    return TopicSummary(
        topic=route.topic,
        message_type=route.queues[0].message_type,
        queues=sum(q.write_queues for q in route.queues),
        brokers=[q.broker_name for q in route.queues],
    )
