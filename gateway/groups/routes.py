"""`/v1/groups`: consumer group admin, lag, offset resets, dead letters (peek and redrive).

Every broker of the gateway's cluster keeps each group's configuration (as every
broker keeps each topic's): writes go to all of them, and a read takes the first
answer. A group is unknown (404) only when every broker says so.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response

from gateway.auth.needs import ADMIN, SUB
from gateway.auth.principal import principal_of
from gateway.auth.route import AuthorizedRoute
from gateway.cluster.writes import (
    create_only_of,
    first_master_answer,
    master_address,
    on_each,
    on_every_master,
    write_failed,
)
from gateway.context import Context, GatewayContext
from gateway.edge.params import GroupName, UserTopic
from gateway.groups import dead_letters, lag_history
from gateway.groups.schemas import (
    DeadLetterList,
    DeadLetterQueue,
    Group,
    GroupLag,
    GroupList,
    GroupUpdate,
    LagHistory,
    OffsetReset,
    OffsetResetRequest,
    QueueLag,
    RedriveRequest,
    RedriveResult,
    ResetQueueOffset,
)
from libs.broker_api import groups as contract
from libs.broker_api.fanout import failure_of_all
from libs.broker_api.groups import GroupConfigAnswer
from libs.errors import (
    AlreadyExists,
    GroupNotFound,
    InvalidRequest,
    InvalidTopicName,
    MalformedBody,
    NotFound,
    ReservedTopicName,
    StoreFull,
    TopicNotFound,
    ValidationFailed,
)
from libs.http.app import json_body, parse_json
from libs.problem import problem_responses
from libs.timeparse import parse_time_ms

router = APIRouter(prefix="/v1/groups", tags=["groups"], route_class=AuthorizedRoute)
GROUP_PROBLEMS = problem_responses(InvalidRequest, GroupNotFound)
"""Of every route on one group: a name that is not a group's (400), a group no broker knows (404)."""


@router.put(
    "/{group}",
    operation_id="putGroup",
    response_model=Group,
    responses={
        201: {"model": Group, "description": "Created"},
        **problem_responses(InvalidRequest, MalformedBody, ValidationFailed, AlreadyExists),
    },
    openapi_extra=json_body(GroupUpdate, required=False),
)
async def put_group(
    ctx: Context,
    group: GroupName,
    request: Request,
    response: Response,
    if_none_match: Annotated[str | None, Header(description="*: create only (412 when the group exists)")] = None,
) -> Group:
    """Create the group on every broker of the cluster (201), or change only the fields named (200).

    Fields absent keep their value (on create, their defaults; no body: every default).
    `If-None-Match: *` makes it create-only (412 already-exists).
    """
    create_only = create_only_of(if_none_match)
    raw = await request.body()
    update = parse_json(GroupUpdate, raw) if raw.strip() else GroupUpdate()
    current = await _current(ctx, group)
    stored, failed = await on_every_master(
        ctx,
        lambda name, address: ctx.brokers.put_group(
            name, address, group, update, created_as=current, create_only=create_only
        ),
    )
    if failed:
        raise write_failed(f"group {group!r}", failed)
    response.status_code = 201 if any(answer.created for _, answer in stored) else 200
    return _public(stored[0][1])


async def _current(ctx: GatewayContext, group: str) -> contract.GroupUpdate | None:
    """The group as a broker holding it has it (what a broker that lacks it creates it from), or None when none
    does: a broker added to the cluster since the group was created gets the group's settings, not the defaults."""
    try:
        held = await first_master_answer(ctx, lambda name, address: ctx.brokers.get_group(name, address, group))
    except GroupNotFound:
        return None
    return contract.GroupUpdate.model_validate(held.model_dump(include=set(contract.GroupUpdate.model_fields)))


@router.get("", operation_id="listGroups", response_model=GroupList)
async def list_groups(ctx: Context, request: Request) -> GroupList:
    """Every consumer group the key may subscribe to or administer, by name."""
    principal = principal_of(request)
    answers, failed = await on_every_master(ctx, ctx.brokers.list_groups)
    if not answers:
        raise failure_of_all(e for _, e in failed)
    groups: dict[str, Group] = {}
    for _, listed in answers:
        for group in listed:
            if principal.may((SUB, ADMIN), "group", group.name):
                groups.setdefault(group.name, _public(group))
    return GroupList(groups=[groups[name] for name in sorted(groups)], unavailable=_unavailable(failed))


@router.get("/{group}", operation_id="getGroup", response_model=Group, responses=GROUP_PROBLEMS)
async def get_group(ctx: Context, group: GroupName) -> Group:
    """The group's configuration and subscriptions."""
    return _public(await first_master_answer(ctx, lambda name, address: ctx.brokers.get_group(name, address, group)))


@router.delete("/{group}", operation_id="deleteGroup", status_code=204, responses=GROUP_PROBLEMS)
async def delete_group(ctx: Context, group: GroupName) -> Response:
    """Delete the group's configuration and subscriptions from every broker (its retry and DLQ topics stay)."""
    deleted, failed = await on_every_master(ctx, lambda name, address: ctx.brokers.delete_group(name, address, group))
    if not deleted:
        raise failure_of_all(e for _, e in failed)
    failed = [(name, e) for name, e in failed if not isinstance(e, NotFound)]
    if failed:
        raise write_failed(f"the deletion of group {group!r}", failed)
    return Response(status_code=204)


@router.get("/{group}/lag", operation_id="getGroupLag", response_model=GroupLag, responses=GROUP_PROBLEMS)
async def get_lag(ctx: Context, group: GroupName) -> GroupLag:
    """Per broker, topic and queue: the broker's offset, the group's, the lag and the messages in flight."""
    answers, failed = await on_every_master(ctx, lambda name, address: ctx.brokers.lag(name, address, group))
    if not answers:
        raise failure_of_all(e for _, e in failed)
    queues = [QueueLag.model_validate({**q, "broker": broker}) for broker, listed in answers for q in listed]
    return GroupLag(
        group=group,
        queues=queues,
        total_lag=sum(q.lag for q in queues),
        total_in_flight=sum(q.in_flight for q in queues),
        unavailable=_unavailable(failed),
    )


@router.get(
    "/{group}/lag/history",
    operation_id="getGroupLagHistory",
    response_model=LagHistory,
    responses=GROUP_PROBLEMS,
)
async def get_lag_history(
    ctx: Context,
    group: GroupName,
    topic: Annotated[str | None, Query(description="only this topic's series")] = None,
) -> LagHistory:
    """The group's lag per topic over the brokers' history (every 10 s for an hour by default), oldest first: what
    the console's lag chart draws. Longer history is Prometheus's (`petrel_group_lag`)."""
    answers, failed = await on_every_master(ctx, lambda name, address: ctx.brokers.lag_history(name, address, group))
    if not answers:
        raise failure_of_all(e for _, e in failed)
    return lag_history.merged(group, answers, topic, _unavailable(failed))


@router.post(
    "/{group}/topics/{topic}/offsets:reset",
    operation_id="resetGroupOffsets",
    response_model=OffsetReset,
    openapi_extra=json_body(OffsetResetRequest),
    responses=problem_responses(
        InvalidRequest,
        InvalidTopicName,
        ReservedTopicName,
        MalformedBody,
        GroupNotFound,
        TopicNotFound,
        ValidationFailed,
    ),
)
async def reset_offsets(ctx: Context, group: GroupName, topic: UserTopic, request: Request) -> OffsetReset:
    """Rewind or skip: move the group's offset in every queue of the topic to a time or an offset."""
    spec = parse_json(OffsetResetRequest, await request.body())
    body = {"timestamp": _reset_time(spec), "offset": spec.offset, "client_id": spec.client_id}
    route = await ctx.routes.get(topic)
    targets = [(q.broker_name, master_address(route, q.broker_name)) for q in route.queues]
    answers, failed = await on_each(
        targets, lambda name, address: ctx.brokers.reset_offsets(name, address, group, topic, body)
    )
    if failed:
        raise write_failed(f"the offsets of group {group!r} in {topic!r}", failed)
    queues = [ResetQueueOffset(broker=b, queue_id=q["queue_id"], offset=q["offset"]) for b, qs in answers for q in qs]
    return OffsetReset(group=group, topic=topic, queues=queues)


@router.get(
    "/{group}/dlq",
    operation_id="peekDeadLetters",
    response_model=DeadLetterList,
    responses=problem_responses(InvalidRequest, GroupNotFound, ValidationFailed),
)
async def peek_dead_letters(
    ctx: Context,
    group: GroupName,
    request: Request,
    offset: Annotated[
        int, Query(ge=0, description="the first DLQ offset to read, on each broker (what was redriven is passed)")
    ] = 0,
    max: Annotated[int, Query(ge=1, le=256, description="at most this many from each broker")] = 32,
) -> DeadLetterList:
    """The group's dead letters still in the DLQ, with why they are there; a redriven one leaves the list.

    Only dead letters of topics the key may subscribe to; the queues' offsets are the whole DLQ's, for paging.
    """
    answers, failed = await on_every_master(
        ctx, lambda name, address: ctx.brokers.dead_letters(name, address, group, offset, max)
    )
    if not answers:
        raise failure_of_all(e for _, e in failed)
    principal = principal_of(request)
    return DeadLetterList(
        messages=[m for broker, batch in answers for m in dead_letters.readable(principal, batch.records, broker)],
        queues=[
            DeadLetterQueue(broker=broker, next_offset=b.next_offset, min_offset=b.min_offset, max_offset=b.max_offset)
            for broker, b in answers
        ],
        unavailable=_unavailable(failed),
    )


@router.post(
    "/{group}/dlq:redrive",
    operation_id="redriveDeadLetters",
    response_model=RedriveResult,
    openapi_extra=json_body(RedriveRequest, required=False),
    responses=problem_responses(InvalidRequest, MalformedBody, GroupNotFound, ValidationFailed, StoreFull),
)
async def redrive(ctx: Context, group: GroupName, request: Request) -> RedriveResult:
    """Send dead letters back to the group, with their message ids kept (all, or those named), rate-limited.

    Only dead letters of topics the key may subscribe to or administer; the others stay (gateway.groups.dead_letters).
    """
    raw = await request.body()
    spec = parse_json(RedriveRequest, raw) if raw.strip() else RedriveRequest()
    result, failed = await dead_letters.redrive(ctx, principal_of(request), group, spec)
    result.unavailable = _unavailable(failed)
    return result


def _unavailable(failed: list[tuple[str, BaseException]]) -> list[str]:
    """The brokers that did not answer (one that does not know the group has nothing to add)."""
    return [name for name, exc in failed if not isinstance(exc, NotFound)]


def _reset_time(spec: OffsetResetRequest) -> int | None:
    if spec.timestamp is None:
        return None
    moment = parse_time_ms(spec.timestamp, "timestamp")
    if moment < 0:
        raise InvalidRequest(f"timestamp {spec.timestamp!r} is before 1970")
    return moment


def _public(answer: GroupConfigAnswer) -> Group:
    """A broker's answer as the public `Group` (the same fields, and the subscriptions)."""
    return Group.model_validate(answer.model_dump())
