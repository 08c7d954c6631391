"""The broker's internal consumer-group API: groups, receive, ack, nack, visibility, lag, offsets, DLQ."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from libs import jsonutil
from libs.broker_api.consume import (
    CLIENT_ID_PATTERN,
    HandleList,
    HandleResults,
    LagAnswer,
    LagHistoryAnswer,
    LagSampleModel,
    NackBody,
    OffsetResetAnswer,
    OffsetResetBody,
    QueueLagModel,
    QueueOffsetAnswer,
    ReadyAnswer,
    ReceiveBody,
    RedriveAnswer,
    RedriveBody,
    VisibilityAnswer,
    VisibilityBody,
)
from libs.broker_api.frames import encode_leased
from libs.broker_api.groups import GroupChange, GroupConfig, GroupConfigAnswer, GroupConfigList, SubscriptionModel
from libs.broker_api.wire import BINARY
from libs.errors import InvalidRequest, PetrelError
from libs.filters import FilterLimits, FilterType, MessageFilter, compile_filter
from libs.http.app import json_body, parse_json
from libs.http.disconnect import client_gone
from libs.http.hot_routes import Binder
from libs.problem import PROBLEM_RESPONSES, entry_problem
from services.broker.consume.groups import Subscription
from services.broker.consume.pop import Receive
from services.broker.consume.progress import group_lag, reset_offsets
from services.broker.context import Context, broker_context
from services.broker.messages import BINARY_BODY, offset_headers

router = APIRouter(prefix="/internal/groups", tags=["consumer groups"], responses=PROBLEM_RESPONSES)


@router.put("/{group}", operation_id="putGroup", response_model=GroupConfigAnswer)
async def put_group(
    ctx: Context,
    group: str,
    body: GroupChange,
    create_only: Annotated[bool, Query(description="412 already-exists when the group exists here")] = False,
) -> GroupConfigAnswer:
    """Create a consumer group here (fields absent from `created_as`, else their defaults), or change only the
    fields named."""
    config, created = await ctx.pop.groups.change(
        group, body.update(), created_as=body.created_as, create_only=create_only
    )
    return _answer(config, ctx.pop.groups.subscriptions(group), created)


@router.get("/{group}", operation_id="getGroup", response_model=GroupConfigAnswer)
async def get_group(ctx: Context, group: str) -> GroupConfigAnswer:
    """One group's configuration and subscriptions here."""
    return _answer(ctx.pop.groups.get(group), ctx.pop.groups.subscriptions(group))


@router.get("", operation_id="listGroups", response_model=GroupConfigList)
async def list_groups(ctx: Context) -> GroupConfigList:
    """Every consumer group here."""
    groups = ctx.pop.groups
    return GroupConfigList(groups=[_answer(g, groups.subscriptions(g.name)) for g in groups.all()])


def _answer(config: GroupConfig, subscriptions: list[Subscription], created: bool = False) -> GroupConfigAnswer:
    return GroupConfigAnswer(
        **{field: getattr(config, field) for field in GroupConfig.model_fields},
        subscriptions=[
            SubscriptionModel(topic=s.topic, filter_type=s.filter_type, expression=s.expression) for s in subscriptions
        ],
        created=created,
    )


@router.delete("/{group}", operation_id="deleteGroup", status_code=204)
async def delete_group(ctx: Context, group: str) -> Response:
    """Delete a group's configuration and subscriptions here (its retry and dead-letter topics stay)."""
    await ctx.pop.groups.delete(group)
    return Response(status_code=204)


def _bind_group(request: Request) -> dict[str, Any]:
    """receive's, ack's and nack's arguments, as FastAPI would give them (the hot path)."""
    return {"ctx": broker_context(request), "request": request, **request.path_params}


HOT_ROUTES: dict[str, Binder] = {
    "receiveMessages": _bind_group,
    "ackMessages": _bind_group,
    "nackMessages": _bind_group,
}
"""Served without FastAPI's request cycle (libs.http.hot_routes)."""


def _receive(group: str, topic: str, body: ReceiveBody, limits: FilterLimits) -> Receive:
    filter_type = body.filter_type or FilterType.TAG
    expression = (body.expression or "").strip() or "*"
    if filter_type is FilterType.SQL92 and expression == "*":
        raise InvalidRequest("an SQL92 filter needs an expression")
    message_filter: MessageFilter | None = None
    if filter_type is FilterType.SQL92 or expression != "*":
        message_filter = compile_filter(filter_type, expression, limits)
    return Receive(
        group,
        topic,
        body.max_messages,
        body.invisible_ms,
        body.wait_ms,
        filter_type,
        expression,
        message_filter,
        body.client_id or "",
    )


@router.post(
    "/{group}/topics/{topic}/receive",
    operation_id="receiveMessages",
    response_class=Response,
    responses={200: BINARY_BODY},
    openapi_extra=json_body(ReceiveBody),
)
async def receive(ctx: Context, group: str, topic: str, request: Request) -> Response:
    """Lease up to max_messages messages (leases, then records: libs.receipt); with wait_ms, held until one comes."""
    body = parse_json(ReceiveBody, await request.body())
    wanted = _receive(group, topic, body, ctx.settings.filter_limits())
    if body.wait_ms <= 0:
        leases, records = await ctx.pop.receive(wanted)
    else:
        async with client_gone(request) as gone:
            leases, records = await ctx.pop.receive(wanted, gone)
    return Response(encode_leased(leases, records), media_type=BINARY)


@router.get("/{group}/topics/{topic}/ready", operation_id="waitUntilReady", response_model=ReadyAnswer)
async def ready(
    ctx: Context,
    request: Request,
    group: str,
    topic: str,
    wait_ms: Annotated[int, Query(ge=0, le=30_000)] = 0,
    filter_type: FilterType | None = None,
    expression: str | None = None,
    client_id: Annotated[str | None, Query(min_length=1, max_length=128, pattern=CLIENT_ID_PATTERN)] = None,
) -> ReadyAnswer:
    """True as soon as a receive would find a message here; nothing is leased."""
    body = ReceiveBody(
        max_messages=1, wait_ms=wait_ms, filter_type=filter_type, expression=expression, client_id=client_id
    )
    async with client_gone(request) as gone:
        wanted = _receive(group, topic, body, ctx.settings.filter_limits())
        return ReadyAnswer(ready=await ctx.pop.ready(wanted, gone))


def _handle_error(handle: str, exc: PetrelError) -> dict[str, object]:
    return {"receipt_handle": handle, "ok": False, "error": entry_problem(exc)}


def _results(results: list[dict[str, object]]) -> Response:
    """HandleResults, written as JSON by hand: acks are a hot path (a response model would validate it again)."""
    return Response(jsonutil.dumps({"results": results}), media_type="application/json")


@router.post(
    "/{group}/ack", operation_id="ackMessages", response_model=HandleResults, openapi_extra=json_body(HandleList)
)
async def ack(ctx: Context, group: str, request: Request) -> Response:
    """End leases: the messages are done. One result per handle, in order."""
    body = parse_json(HandleList, await request.body())
    errors = await ctx.settlement.ack(group, body.receipt_handles)
    return _results(
        [
            {"receipt_handle": handle, "ok": True, "error": None} if error is None else _handle_error(handle, error)
            for handle, error in zip(body.receipt_handles, errors, strict=True)
        ]
    )


@router.post(
    "/{group}/nack", operation_id="nackMessages", response_model=HandleResults, openapi_extra=json_body(NackBody)
)
async def nack(ctx: Context, group: str, request: Request) -> Response:
    """Failed attempts: each message is retried later (or dead-lettered after max_retries)."""
    body = parse_json(NackBody, await request.body())
    if body.delay_ms is not None and body.delay_level is not None:
        raise InvalidRequest("give delay_ms or delay_level, not both")
    if body.delay_level is not None and body.delay_level > len(ctx.settings.delay_levels):
        raise InvalidRequest(f"delay_level must be between 1 and {len(ctx.settings.delay_levels)}")
    results: list[dict[str, object]] = []
    for handle in body.receipt_handles:
        try:
            await ctx.settlement.nack(group, handle, body.delay_ms, body.delay_level, body.reason)
            results.append({"receipt_handle": handle, "ok": True, "error": None})
        except PetrelError as exc:
            results.append(_handle_error(handle, exc))
    return _results(results)


@router.post("/{group}/visibility", operation_id="changeVisibility", response_model=VisibilityAnswer)
async def change_visibility(ctx: Context, group: str, body: VisibilityBody) -> VisibilityAnswer:
    """Extend or shorten a lease; answers the lease's new handle (the old one stops working)."""
    lease = await ctx.settlement.change_visibility(group, body.receipt_handle, body.invisible_ms)
    return VisibilityAnswer(receipt_handle=lease.receipt_handle, invisible_until=lease.invisible_until)


@router.get("/{group}/lag", operation_id="getGroupLag", response_model=LagAnswer)
async def lag(ctx: Context, group: str) -> LagAnswer:
    """Per subscribed queue here: the broker's offset, the group's, the lag and what is in flight."""
    return LagAnswer(
        queues=[
            QueueLagModel(
                topic=q.topic,
                queue_id=q.queue_id,
                broker_offset=q.broker_offset,
                consumer_offset=q.consumer_offset,
                lag=q.lag,
                in_flight=q.in_flight,
                retry=q.retry,
                client_id=q.client_id,
            )
            for q in group_lag(ctx.pop, group)
        ]
    )


@router.get("/{group}/lag/history", operation_id="getGroupLagHistory", response_model=LagHistoryAnswer)
async def lag_history(ctx: Context, group: str) -> LagHistoryAnswer:
    """This broker's samples of the group's lag per topic, oldest first (services.broker.lag_history)."""
    ctx.pop.groups.get(group)  # 404 group-not-found for a group this broker does not know
    history = ctx.lag_history
    return LagHistoryAnswer(
        interval_seconds=history.interval,
        history_seconds=history.history,
        samples=[LagSampleModel(at_ms=s.at_ms, topics=s.topics) for s in history.samples(group)],
    )


@router.post("/{group}/topics/{topic}/offsets:reset", operation_id="resetOffsets", response_model=OffsetResetAnswer)
async def reset(ctx: Context, group: str, topic: str, body: OffsetResetBody) -> OffsetResetAnswer:
    """Rewind or skip: every queue of the topic to `offset`, or to the first message at or after `timestamp`."""
    moved = reset_offsets(ctx.pop, group, topic, body.client_id or "", body.timestamp, body.offset)
    return OffsetResetAnswer(queues=[QueueOffsetAnswer(queue_id=q, offset=o) for q, o in moved])


@router.get("/{group}/dlq", operation_id="peekDeadLetters", response_class=Response, responses={200: BINARY_BODY})
async def peek_dead_letters(
    ctx: Context,
    group: str,
    offset: Annotated[int, Query(ge=0)] = 0,
    max: Annotated[int, Query(ge=1, le=256)] = 32,
) -> Response:
    """Dead letters still here from `offset` on (records, libs.codec), with the DLQ queue's offsets in headers."""
    result = ctx.dead_letters.peek(group, offset, max)
    return Response(b"".join(result.records), media_type=BINARY, headers=offset_headers(result))


@router.post("/{group}/dlq:redrive", operation_id="redriveDeadLetters", response_model=RedriveAnswer)
async def redrive(ctx: Context, group: str, body: RedriveBody) -> RedriveAnswer:
    """Send dead letters back to the group (all, or by message id), at most per_second a second."""
    done = await ctx.dead_letters.redrive(group, body.message_ids, body.max_messages, body.per_second)
    return RedriveAnswer(redriven=done.redriven, not_found=done.not_found, remaining=done.remaining)
