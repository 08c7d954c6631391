"""`/v1/groups/{group}`: receive under a lease, ack, nack, change a lease's visibility.

Receive goes to the brokers holding the topic (libs.broker_api.receiver). Ack, nack and
visibility go to the broker named in each receipt handle: the gateway reads that
name without checking the signature (the broker checks it), so a handle that is
not even readable is refused here without calling anyone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

from fastapi import APIRouter, Request, Response

from gateway.auth.route import AuthorizedRoute
from gateway.consume.schemas import (
    AckRequest,
    HandleResults,
    NackRequest,
    ReceiveRequest,
    ReceiveResult,
    VisibilityRequest,
    VisibilityResult,
)
from gateway.context import Context, GatewayContext, gateway_context
from gateway.edge.entries import failed_handle
from gateway.edge.params import GroupName, UserTopic
from gateway.edge.records import message_fields
from libs import jsonutil
from libs.broker_api.receiver import Receive, Received
from libs.codec import iter_records
from libs.errors import (
    AlreadyAcked,
    BrokerUnavailable,
    ForeignReceiptHandle,
    GroupNotFound,
    InvalidFilter,
    InvalidReceiptHandle,
    InvalidRequest,
    InvalidTopicName,
    LeaseEnded,
    LeaseExpired,
    LeaseLost,
    LeaseSuperseded,
    MalformedBody,
    PetrelError,
    ReservedTopicName,
    TooManyLongPolls,
    TopicNotFound,
    ValidationFailed,
)
from libs.http.app import json_body, parse_json
from libs.http.disconnect import client_gone
from libs.http.hot_routes import Binder
from libs.message import Prop
from libs.names import validate_group_name, validate_topic_name
from libs.problem import problem_responses
from libs.receipt import ReceiptHandle

router = APIRouter(prefix="/v1/groups", tags=["consume"], route_class=AuthorizedRoute)

JSON: Final = "application/json"

SettleCall = Callable[[str, str, list[str]], Awaitable[list[dict[str, Any]]]]
"""(broker, address, that broker's handles) -> one HandleResult dict per handle, in order."""


@router.post(
    "/{group}/topics/{topic}/receive",
    operation_id="receiveMessages",
    response_model=ReceiveResult,
    openapi_extra=json_body(ReceiveRequest),
    responses=problem_responses(
        InvalidRequest,
        InvalidTopicName,
        ReservedTopicName,
        MalformedBody,
        InvalidFilter,
        TopicNotFound,
        GroupNotFound,
        ValidationFailed,
        TooManyLongPolls,
    ),
)
async def receive(ctx: Context, group: GroupName, topic: UserTopic, request: Request) -> Response:
    """Lease up to max_messages messages; with wait_seconds, wait for the first one to arrive."""
    spec = _receive(parse_json(ReceiveRequest, await request.body()))
    if spec.wait_seconds <= 0:
        received = await ctx.receiver.receive(group, topic, spec)
    else:
        async with client_gone(request) as gone:  # a consumer that leaves ends its wait at the brokers too
            received = await ctx.receiver.receive(group, topic, spec, gone)
    return Response(jsonutil.dumps({"messages": received_messages(received)}), media_type=JSON)


@router.post(
    "/{group}/ack",
    operation_id="ackMessages",
    response_model=HandleResults,
    openapi_extra=json_body(AckRequest),
    responses=problem_responses(InvalidRequest, MalformedBody, ValidationFailed),
)
async def ack(ctx: Context, group: GroupName, request: Request) -> Response:
    """End the leases: the messages are consumed. One result per handle, in order."""
    spec = parse_json(AckRequest, await request.body())

    async def call(broker: str, address: str, handles: list[str]) -> list[dict[str, Any]]:
        return await ctx.brokers.ack(broker, address, group, handles)

    results = await settle(ctx, spec.receipt_handles, call)
    return Response(jsonutil.dumps({"results": results}), media_type=JSON)


@router.post(
    "/{group}/nack",
    operation_id="nackMessages",
    response_model=HandleResults,
    openapi_extra=json_body(NackRequest),
    responses=problem_responses(InvalidRequest, MalformedBody, ValidationFailed),
)
async def nack(ctx: Context, group: GroupName, request: Request) -> Response:
    """Failed attempts: each message comes back after a delay, or goes to the DLQ after max_retries."""
    spec = parse_json(NackRequest, await request.body())
    _check_delay(ctx, spec)
    fields = {"delay_ms": spec.delay_ms, "delay_level": spec.delay_level, "reason": spec.reason}

    async def call(broker: str, address: str, handles: list[str]) -> list[dict[str, Any]]:
        return await ctx.brokers.nack(broker, address, group, {"receipt_handles": handles, **fields})

    results = await settle(ctx, spec.receipt_handles, call)
    return Response(jsonutil.dumps({"results": results}), media_type=JSON)


@router.post(
    "/{group}/visibility",
    operation_id="changeVisibility",
    response_model=VisibilityResult,
    openapi_extra=json_body(VisibilityRequest),
    responses=problem_responses(
        InvalidRequest,
        MalformedBody,
        InvalidReceiptHandle,
        ForeignReceiptHandle,
        GroupNotFound,
        LeaseEnded,
        LeaseExpired,
        LeaseSuperseded,
        LeaseLost,
        AlreadyAcked,
        ValidationFailed,
    ),
)
async def change_visibility(ctx: Context, group: GroupName, request: Request) -> VisibilityResult:
    """Extend or shorten a lease from now; answers a new handle (the old one no longer acks)."""
    spec = parse_json(VisibilityRequest, await request.body())
    broker = ReceiptHandle.decode(spec.receipt_handle).broker
    address = (await ctx.masters.lookup([broker])).get(broker)
    if address is None:
        raise _unknown_broker(broker)
    answer = await ctx.brokers.change_visibility(
        broker, address, group, spec.receipt_handle, spec.invisible_seconds * 1000
    )
    return VisibilityResult.model_validate(answer)


def _bind_group(request: Request) -> dict[str, Any]:
    """ack's and nack's arguments, as FastAPI's dependencies would give them (the hot path)."""
    return {
        "ctx": gateway_context(request),
        "group": validate_group_name(request.path_params["group"]),
        "request": request,
    }


def _bind_receive(request: Request) -> dict[str, Any]:
    return _bind_group(request) | {"topic": validate_topic_name(request.path_params["topic"])}


HOT_ROUTES: dict[str, Binder] = {
    "receiveMessages": _bind_receive,
    "ackMessages": _bind_group,
    "nackMessages": _bind_group,
}
"""Served without FastAPI's request cycle (libs.http.hot_routes)."""


def _receive(spec: ReceiveRequest) -> Receive:
    return Receive(
        max_messages=spec.max_messages,
        wait_seconds=spec.wait_seconds,
        invisible_seconds=spec.invisible_seconds,
        filter_type=spec.filter.type.value if spec.filter else None,
        expression=spec.filter.expression if spec.filter else None,
        client_id=spec.client_id,
    )


def received_messages(received: list[Received]) -> list[dict[str, Any]]:
    """ReceivedMessage's fields; the topic is the one the message was sent to, also for a retry."""
    messages = []
    for batch in received:
        for lease, record in zip(batch.leases, iter_records(batch.records), strict=True):
            fields = message_fields(record, batch.broker)
            fields["topic"] = record.properties.get(Prop.RETRY_TOPIC, record.topic)
            fields["receipt_handle"] = lease.receipt_handle
            fields["delivery_attempt"] = lease.delivery_attempt
            fields["invisible_until"] = lease.invisible_until
            messages.append(fields)
    return messages


async def settle(ctx: GatewayContext, handles: list[str], call: SettleCall) -> list[dict[str, Any]]:
    """Ack or nack each handle at its broker, all brokers at once; the results in the handles' order."""
    results: list[dict[str, Any] | None] = [None] * len(handles)
    owned: dict[str, list[int]] = {}
    for index, text in enumerate(handles):
        try:
            owned.setdefault(ReceiptHandle.decode(text).broker, []).append(index)
        except InvalidReceiptHandle as exc:
            results[index] = failed_handle(text, exc)
    addresses = await ctx.masters.lookup(owned) if owned else {}
    for broker in owned.keys() - addresses.keys():
        for index in owned.pop(broker):
            results[index] = failed_handle(handles[index], _unknown_broker(broker))
    calls = list(owned.items())
    answers = await asyncio.gather(
        *(call(broker, addresses[broker], [handles[i] for i in indexes]) for broker, indexes in calls),
        return_exceptions=True,
    )
    for (broker, indexes), answer in zip(calls, answers, strict=True):
        for position, index in enumerate(indexes):
            results[index] = _entry(handles[index], broker, answer, position)
    return [r for r in results if r is not None]


def _entry(handle: str, broker: str, answer: list[dict[str, Any]] | BaseException, position: int) -> dict[str, Any]:
    if isinstance(answer, PetrelError):
        return failed_handle(handle, answer)
    if isinstance(answer, BaseException):
        raise answer
    if len(answer) <= position:
        return failed_handle(
            handle, BrokerUnavailable(f"broker {broker} answered no result for this handle", broker=broker)
        )
    return answer[position]


def _unknown_broker(broker: str) -> InvalidReceiptHandle:
    return InvalidReceiptHandle(f"the receipt handle names broker {broker}, which is not registered")


def _check_delay(ctx: GatewayContext, spec: NackRequest) -> None:
    levels = ctx.records.delay_levels
    if spec.delay_level is not None and spec.delay_level > levels:
        raise InvalidRequest(f"delay_level {spec.delay_level} is not between 1 and {levels}")
    if spec.delay_ms is not None and spec.delay_ms > ctx.records.max_delay_ms:
        raise InvalidRequest(f"delay_ms {spec.delay_ms} is more than the longest delay, {ctx.records.max_delay_ms} ms")
