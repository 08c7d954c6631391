"""`/v1/groups/{group}/subscriptions`: push subscriptions, kept and run by the push service (libs.push_api).

`/v1/subscriptions` lists every group's at once (the console's push page: one call, not one per group).

The gateway checks names, and before a PUT that the consumer group exists and
is not broadcast (a broadcast group delivers every message to each of its
clients, which one endpoint cannot be) and that the topic exists; the rest (the
endpoint URL, the SSRF guard, the secret) is the push service's, whose errors
are passed on unchanged.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from gateway.auth.needs import ADMIN
from gateway.auth.principal import principal_of
from gateway.auth.route import AuthorizedRoute
from gateway.cluster.writes import first_master_answer
from gateway.context import Context, GatewayContext
from gateway.edge.params import GroupName, UserTopic
from gateway.push.schemas import PushSubscription, PushSubscriptionList
from libs.errors import (
    GroupNotFound,
    InvalidRequest,
    InvalidTopicName,
    MalformedBody,
    ReservedTopicName,
    SubscriptionNotFound,
    TopicNotFound,
    ValidationFailed,
)
from libs.http.app import json_body, parse_json
from libs.problem import merge_problem_responses, problem_responses
from libs.push_api.schemas import (
    MAX_ATTEMPTS_SHOWN,
    PushAttempts,
    RotateSecretRequest,
    Subscription,
    SubscriptionList,
    SubscriptionRequest,
)

router = APIRouter(prefix="/v1/groups", tags=["push"], route_class=AuthorizedRoute)
every_group = APIRouter(prefix="/v1/subscriptions", tags=["push"], route_class=AuthorizedRoute)
SUBSCRIPTION_PROBLEMS = problem_responses(InvalidRequest, InvalidTopicName, ReservedTopicName, SubscriptionNotFound)
"""Of every route on one subscription: a name that is not a group's or a topic's (400), no such subscription (404)."""


@router.put(
    "/{group}/subscriptions/{topic}",
    operation_id="putSubscription",
    response_model=PushSubscription,
    responses={
        201: {"model": PushSubscription, "description": "Created"},
        **problem_responses(
            InvalidRequest,
            InvalidTopicName,
            ReservedTopicName,
            MalformedBody,
            GroupNotFound,
            TopicNotFound,
            ValidationFailed,
        ),
    },
    openapi_extra=json_body(SubscriptionRequest),
)
async def put_subscription(
    ctx: Context, group: GroupName, topic: UserTopic, request: Request, response: Response
) -> Subscription:
    """Push the group's messages of the topic to `endpoint_url` (201 when created; the secret is shown then only)."""
    body = parse_json(SubscriptionRequest, await request.body())
    await _require_pushable(ctx, group, topic)
    subscription, created = await ctx.push.put(group, topic, body)
    response.status_code = 201 if created else 200
    return subscription


@router.get(
    "/{group}/subscriptions",
    operation_id="listSubscriptions",
    response_model=PushSubscriptionList,
    responses=problem_responses(InvalidRequest),
)
async def list_subscriptions(ctx: Context, group: GroupName) -> SubscriptionList:
    """The group's push subscriptions, by topic."""
    return await ctx.push.list(group)


@every_group.get("", operation_id="listAllSubscriptions", response_model=PushSubscriptionList)
async def list_all_subscriptions(ctx: Context, request: Request) -> SubscriptionList:
    """Every push subscription of the groups the key may administer, by group then topic (one push service call)."""
    principal = principal_of(request)
    listed = await ctx.push.list()
    shown = [s for s in listed.subscriptions if principal.may((ADMIN,), "group", s.group)]
    return SubscriptionList(subscriptions=shown)


@router.get(
    "/{group}/subscriptions/{topic}",
    operation_id="getSubscription",
    response_model=PushSubscription,
    responses=SUBSCRIPTION_PROBLEMS,
)
async def get_subscription(ctx: Context, group: GroupName, topic: UserTopic) -> Subscription:
    """The subscription and its live state: in flight, the window, rates, the last errors."""
    return await ctx.push.get(group, topic)


@router.delete(
    "/{group}/subscriptions/{topic}",
    operation_id="deleteSubscription",
    status_code=204,
    responses=SUBSCRIPTION_PROBLEMS,
)
async def delete_subscription(ctx: Context, group: GroupName, topic: UserTopic) -> Response:
    """Stop pushing; the messages stay in the group (leased ones come back after their lease)."""
    await ctx.push.delete(group, topic)
    return Response(status_code=204)


@router.post(
    "/{group}/subscriptions/{topic}:pause",
    operation_id="pauseSubscription",
    response_model=PushSubscription,
    responses=SUBSCRIPTION_PROBLEMS,
)
async def pause_subscription(ctx: Context, group: GroupName, topic: UserTopic) -> Subscription:
    """Push nothing more until `:resume` (deliveries under way finish)."""
    return await ctx.push.pause(group, topic)


@router.post(
    "/{group}/subscriptions/{topic}:resume",
    operation_id="resumeSubscription",
    response_model=PushSubscription,
    responses=SUBSCRIPTION_PROBLEMS,
)
async def resume_subscription(ctx: Context, group: GroupName, topic: UserTopic) -> Subscription:
    """Push again, after a pause or after the endpoint answered 410 Gone."""
    return await ctx.push.resume(group, topic)


@router.post(
    "/{group}/subscriptions/{topic}:rotate-secret",
    operation_id="rotateSubscriptionSecret",
    response_model=PushSubscription,
    openapi_extra=json_body(RotateSecretRequest, required=False),
    responses=merge_problem_responses(SUBSCRIPTION_PROBLEMS, problem_responses(MalformedBody, ValidationFailed)),
)
async def rotate_secret(ctx: Context, group: GroupName, topic: UserTopic, request: Request) -> Subscription:
    """A new signing secret, shown in this answer; both sign until `secret_overlap_until` (no body: one day)."""
    raw = await request.body()
    rotation = parse_json(RotateSecretRequest, raw) if raw.strip() else RotateSecretRequest()
    return await ctx.push.rotate_secret(group, topic, rotation)


@router.get(
    "/{group}/subscriptions/{topic}/attempts",
    operation_id="listPushAttempts",
    response_model=PushAttempts,
    responses=merge_problem_responses(SUBSCRIPTION_PROBLEMS, problem_responses(ValidationFailed)),
)
async def list_attempts(
    ctx: Context,
    group: GroupName,
    topic: UserTopic,
    limit: Annotated[int, Query(ge=1, le=MAX_ATTEMPTS_SHOWN, description="at most this many")] = 50,
) -> PushAttempts:
    """The latest delivery attempts, newest first: status, latency, error (since the push service started)."""
    return await ctx.push.attempts(group, topic, limit)


async def _require_pushable(ctx: GatewayContext, group: str, topic: str) -> None:
    """GroupNotFound or TopicNotFound (404), or InvalidRequest for a broadcast group."""
    found = await first_master_answer(ctx, lambda name, address: ctx.brokers.get_group(name, address, group))
    if found.broadcast:
        raise InvalidRequest(
            f"group {group!r} is a broadcast group: a broadcast group cannot be pushed to "
            "(each of its clients receives every message); push to a clustering group"
        )
    await ctx.routes.get(topic)
