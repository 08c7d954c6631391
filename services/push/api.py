"""The push service's internal API: the subscriptions, as the gateway's `/v1/groups/{group}/subscriptions` asks.

Each write goes to the SubscriptionStore (in a worker thread: SQLAlchemy is
synchronous), then to the running deliveries (`LiveSubscriptions.apply` or
`remove`); the answer is the stored subscription with its live status. The
signing secret is shown only in the answer that set it (created, given in the
PUT, or rotated). An endpoint URL is checked before it is stored: its form
(libs.producer_groups) and where its host resolves (libs.egress, the SSRF
guard); the deliveries check it again at each connect.

The app that includes `router` hands the handlers, as lifespan state, `store`
(SubscriptionStore), `live` (LiveSubscriptions) and `egress` (EgressGuard), and
registers `REQUEST_BODIES` in its spec (`libs.http.app.register_schemas`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Final, cast

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel

from libs.egress import EgressGuard
from libs.errors import InvalidRequest
from libs.filters import FilterType, compile_filter
from libs.filters.schema import MessageFilter
from libs.http.app import json_body, parse_json
from libs.names import validate_group_name, validate_topic_name
from libs.problem import PROBLEM_RESPONSES
from libs.producer_groups import validate_http_url
from libs.push_api import schemas
from libs.push_api.schemas import MAX_ATTEMPTS_SHOWN, RotateSecretRequest, SubscriptionRequest
from services.push.live import LiveSubscriptions
from services.push.subscriptions import Subscription, SubscriptionStore

REQUEST_BODIES: Final[tuple[type[BaseModel], ...]] = (SubscriptionRequest, RotateSecretRequest)
"""The bodies the handlers parse themselves: the app registers them (`register_schemas`)."""


async def _store(request: Request) -> SubscriptionStore:
    return cast(SubscriptionStore, request.state.store)


async def _live(request: Request) -> LiveSubscriptions:
    return cast(LiveSubscriptions, request.state.live)


async def _egress(request: Request) -> EgressGuard:
    return cast(EgressGuard, request.state.egress)


Store = Annotated[SubscriptionStore, Depends(_store)]
Live = Annotated[LiveSubscriptions, Depends(_live)]
Egress = Annotated[EgressGuard, Depends(_egress)]
router = APIRouter(prefix="/internal/subscriptions", tags=["push"], responses=PROBLEM_RESPONSES)


@router.put(
    "/{group}/{topic}",
    operation_id="putSubscription",
    response_model=schemas.Subscription,
    responses={201: {"model": schemas.Subscription, "description": "Created"}},
    openapi_extra=json_body(SubscriptionRequest),
)
async def put_subscription(
    group: str, topic: str, request: Request, response: Response, store: Store, live: Live, egress: Egress
) -> schemas.Subscription:
    """Create (201) or replace (200) the subscription; the answer shows the signing secret when it was set."""
    validate_group_name(group)
    validate_topic_name(topic)
    body = parse_json(SubscriptionRequest, await request.body())
    await asyncio.to_thread(check_request, body, egress)
    stored, created = await asyncio.to_thread(store.put, group, topic, body)
    await live.apply(stored)
    response.status_code = 201 if created else 200
    return answer(stored, live, show_secret=created or body.signing_secret is not None)


@router.get("", operation_id="listSubscriptions", response_model=schemas.SubscriptionList)
async def list_subscriptions(
    store: Store, live: Live, group: Annotated[str | None, Query(description="only this group's")] = None
) -> schemas.SubscriptionList:
    """Every subscription (of the group), by group then topic."""
    found = await asyncio.to_thread(store.list, group)
    return schemas.SubscriptionList(subscriptions=[answer(s, live) for s in found])


@router.get("/{group}/{topic}", operation_id="getSubscription", response_model=schemas.Subscription)
async def get_subscription(group: str, topic: str, store: Store, live: Live) -> schemas.Subscription:
    """The subscription and what its deliveries are doing now (the secret is not shown)."""
    return answer(await asyncio.to_thread(store.get, group, topic), live)


@router.delete("/{group}/{topic}", operation_id="deleteSubscription", status_code=204)
async def delete_subscription(group: str, topic: str, store: Store, live: Live) -> Response:
    """Stop the deliveries and forget the subscription; the group's messages stay in the group."""
    await asyncio.to_thread(store.delete, group, topic)
    await live.remove(group, topic)
    return Response(status_code=204)


@router.post("/{group}/{topic}/pause", operation_id="pauseSubscription", response_model=schemas.Subscription)
async def pause_subscription(group: str, topic: str, store: Store, live: Live) -> schemas.Subscription:
    """Deliver nothing until `resume` (deliveries under way finish)."""
    paused = await asyncio.to_thread(store.set_paused, group, topic, True)
    await live.apply(paused)
    return answer(paused, live)


@router.post("/{group}/{topic}/resume", operation_id="resumeSubscription", response_model=schemas.Subscription)
async def resume_subscription(group: str, topic: str, store: Store, live: Live) -> schemas.Subscription:
    """Deliver again: after a pause, or after the endpoint answered 410 Gone."""
    resumed = await asyncio.to_thread(store.set_paused, group, topic, False)
    await live.apply(resumed)
    return answer(resumed, live)


@router.post(
    "/{group}/{topic}/rotate-secret",
    operation_id="rotateSubscriptionSecret",
    response_model=schemas.Subscription,
    openapi_extra=json_body(RotateSecretRequest, required=False),
)
async def rotate_secret(group: str, topic: str, request: Request, store: Store, live: Live) -> schemas.Subscription:
    """A new signing secret (shown in this answer); the previous one signs too until `secret_overlap_until`."""
    raw = await request.body()
    rotation = parse_json(RotateSecretRequest, raw) if raw.strip() else RotateSecretRequest()
    rotated = await asyncio.to_thread(store.rotate_secret, group, topic, rotation.overlap_seconds)
    await live.apply(rotated)
    return answer(rotated, live, show_secret=True)


@router.get("/{group}/{topic}/attempts", operation_id="listPushAttempts", response_model=schemas.PushAttempts)
async def list_attempts(
    group: str,
    topic: str,
    store: Store,
    live: Live,
    limit: Annotated[int, Query(ge=1, le=MAX_ATTEMPTS_SHOWN, description="at most this many")] = 50,
) -> schemas.PushAttempts:
    """The latest delivery attempts, newest first (kept in memory since the push service started)."""
    await asyncio.to_thread(store.get, group, topic)  # SubscriptionNotFound
    return schemas.PushAttempts(attempts=live.attempts(group, topic, limit))


def check_request(request: SubscriptionRequest, egress: EgressGuard) -> None:
    """InvalidRequest (400) saying why: an endpoint not http(s) or inside the cluster, or a bad filter."""
    url = request.endpoint_url
    validate_http_url(url, "endpoint_url")  # a malformed URL is said so before any resolving
    try:
        egress.check(url)
    except InvalidRequest as exc:
        raise InvalidRequest(f"endpoint_url {url!r} is refused: {exc.detail}") from None
    if request.filter is not None:
        compile_filter(request.filter.type, request.filter.expression)


def answer(subscription: Subscription, live: LiveSubscriptions, *, show_secret: bool = False) -> schemas.Subscription:
    """The subscription as its API shows it, with its live status."""
    s = subscription
    overlapping = len(s.signing_secrets(int(time.time() * 1000))) > 1
    return schemas.Subscription(
        group=s.group,
        topic=s.topic,
        endpoint_url=s.endpoint_url,
        filter=_filter(s),
        max_in_flight=s.max_in_flight,
        rate_per_second=s.rate_per_second,
        timeout_seconds=s.timeout_seconds,
        payload_format=s.payload_format,
        invisible_seconds=s.invisible_seconds,
        paused=s.paused,
        disabled_reason=s.disabled_reason,
        signing_secret=s.signing_secret if show_secret else None,
        secret_overlap_until=s.previous_secret_until if overlapping else None,
        created_at=s.created_at,
        updated_at=s.updated_at,
        status=live.status(s),
    )


def _filter(subscription: Subscription) -> MessageFilter | None:
    if subscription.filter_type is None or subscription.expression is None:
        return None
    return MessageFilter(type=FilterType(subscription.filter_type), expression=subscription.expression)
