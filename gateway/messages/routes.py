"""`/v1` messages: send one, send a batch, pull by offset, find by id and by key."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from pydantic import BaseModel

from gateway.auth.needs import ADMIN, SUB
from gateway.auth.principal import principal_of, reveal
from gateway.auth.route import AuthorizedRoute
from gateway.cluster.writes import ensure_topic, read_address
from gateway.context import Context, GatewayContext, gateway_context
from gateway.edge.entries import entry_error
from gateway.edge.message_ids import ask_every_broker, id_time
from gateway.edge.outgoing import outgoing
from gateway.edge.params import MessageId, QueueId, ReadableTopic, UserTopic
from gateway.edge.records import message_fields
from gateway.messages import trace
from gateway.messages.idempotency import MAX_KEY_LENGTH
from gateway.messages.queues import pick_broker
from gateway.messages.records import Prepared
from gateway.messages.schemas import (
    BatchEntry,
    BatchResult,
    Message,
    MessageList,
    PullResult,
    SendBatch,
    SendMessage,
    SendResult,
)
from gateway.messages.sender import Pins, Sent, unsettled
from gateway.messages.trace_schemas import MessageTrace
from libs import jsonutil
from libs.codec import iter_records
from libs.errors import (
    BrokerUnavailable,
    FlushTimeout,
    Forbidden,
    IdempotencyConflict,
    InvalidFilter,
    InvalidMessage,
    InvalidRequest,
    InvalidTopicName,
    MalformedBody,
    MessageNotFound,
    NotMaster,
    OffsetOutOfRange,
    PetrelError,
    PutQueueFull,
    QueueNotFound,
    ReplicationTimeout,
    ReservedTopicName,
    StoreFull,
    StoreReadOnly,
    TooManyLongPolls,
    TopicNotFound,
    ValidationFailed,
)
from libs.http.app import json_body, parse_json
from libs.http.hot_routes import Binder
from libs.message import MessageRecord
from libs.names import validate_topic_name
from libs.problem import problem_responses
from libs.timeparse import parse_time_ms

router = APIRouter(prefix="/v1", tags=["messages"], route_class=AuthorizedRoute)

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description=f"repeat-safe sends for 24 h: 1 to {MAX_KEY_LENGTH} characters (else 422)",
        json_schema_extra={"minLength": 1, "maxLength": MAX_KEY_LENGTH},
    ),
]
MAX_WAIT_MS = 30_000
SEND_PROBLEMS = problem_responses(
    InvalidTopicName,
    ReservedTopicName,
    MalformedBody,
    InvalidMessage,
    TopicNotFound,  # when topics are not created by a send (PETREL_GATEWAY_AUTO_CREATE_TOPICS=false)
    IdempotencyConflict,
    ValidationFailed,
    BrokerUnavailable,
    FlushTimeout,
    NotMaster,
    ReplicationTimeout,
    PutQueueFull,
    StoreReadOnly,
    StoreFull,
)


@router.post(
    "/topics/{topic}/messages",
    operation_id="sendMessage",
    response_model=SendResult,
    status_code=201,
    openapi_extra=json_body(SendMessage),
    responses=SEND_PROBLEMS,
)
async def send_message(
    ctx: Context, topic: UserTopic, request: Request, idempotency_key: IdempotencyKey = None
) -> Response:
    """Send one message; answers where it was stored."""
    message = parse_json(SendMessage, await request.body())

    async def run(ids: list[str | None], pins: Pins | None) -> tuple[dict[str, Any], bool]:
        prepared = ctx.records.prepare(topic, outgoing(message), message_id=ids[0])
        await ensure_topic(ctx, topic)
        (result,) = await ctx.sender.send(topic, [prepared], pins)
        if isinstance(result, PetrelError):
            raise result
        _emit_sent(request, topic, [prepared], [result], idempotency_key)
        return result.fields(), True

    answer = await _idempotent(ctx, request, f"send:{topic}", idempotency_key, message, 1, run)
    return Response(jsonutil.dumps(answer), status_code=201, media_type="application/json")


@router.post(
    "/topics/{topic}/messages:batch",
    operation_id="sendMessageBatch",
    response_model=BatchResult,
    openapi_extra=json_body(SendBatch),
    responses=SEND_PROBLEMS,
)
async def send_batch(
    ctx: Context, topic: UserTopic, request: Request, idempotency_key: IdempotencyKey = None
) -> Response:
    """Send up to 256 messages; one result (or error) per message, in order."""
    batch = parse_json(SendBatch, await request.body())

    async def run(ids: list[str | None], pins: Pins | None) -> tuple[dict[str, Any], bool]:
        # BatchResult's fields as plain data: per-entry models would cost more than the entries' sends
        entries: list[dict[str, Any] | None] = [None] * len(batch.messages)
        prepared: list[tuple[int, Prepared]] = []
        settled = True
        for index, message in enumerate(batch.messages):
            try:
                prepared.append((index, ctx.records.prepare(topic, outgoing(message), message_id=ids[index])))
            except PetrelError as exc:
                entries[index] = _failed_entry(index, exc)
        if prepared:
            await ensure_topic(ctx, topic)
            results = await ctx.sender.send(topic, [p for _, p in prepared], pins)
            for (index, _), result in zip(prepared, results, strict=True):
                if isinstance(result, PetrelError):
                    entries[index] = _failed_entry(index, result)
                    settled = settled and not unsettled(result)
                else:
                    entries[index] = {"index": index, "result": result.fields(), "error": None}
            sent = [(p, r) for (_, p), r in zip(prepared, results, strict=True) if isinstance(r, Sent)]
            _emit_sent(request, topic, [p for p, _ in sent], [r for _, r in sent], idempotency_key)
        return {"results": entries}, settled

    answer = await _idempotent(ctx, request, f"batch:{topic}", idempotency_key, batch, len(batch.messages), run)
    return Response(jsonutil.dumps(answer), media_type="application/json")


@router.get(
    "/topics/{topic}/queues/{queue_id}/messages",
    operation_id="pullMessages",
    response_model=PullResult,
    responses=problem_responses(
        InvalidTopicName,
        ReservedTopicName,
        InvalidRequest,
        InvalidFilter,
        TopicNotFound,
        QueueNotFound,
        OffsetOutOfRange,
        ValidationFailed,
        TooManyLongPolls,
    ),
)
async def pull_messages(
    ctx: Context,
    topic: ReadableTopic,
    queue_id: QueueId,
    offset: Annotated[int, Query(ge=0, description="the first queue offset to read")] = 0,
    max: Annotated[int, Query(ge=1, le=256, description="at most this many messages")] = 32,
    wait_ms: Annotated[int, Query(ge=0, le=MAX_WAIT_MS, description="hold an empty pull this long")] = 0,
    tag: Annotated[str | None, Query(description="TAG filter: TagA || TagB, or *")] = None,
    sql: Annotated[str | None, Query(description="SQL92 filter over properties and TAGS")] = None,
    broker: Annotated[str | None, Query(description="the broker, when several hold the topic")] = None,
) -> PullResult:
    """Messages of one queue from an offset; with wait_ms, waits for the first one to arrive.

    A user topic's: system topics are refused (400 reserved-topic-name, naming where they are read).
    """
    route = await ctx.routes.get(topic)
    name, address = pick_broker(route, broker)
    params: dict[str, str | int] = {"offset": offset, "max": max, "wait_ms": wait_ms}
    if tag is not None:
        params["tag"] = tag
    if sql is not None:
        params["sql"] = sql
    pulled = await ctx.brokers.pull(name, address, topic, queue_id, params, wait_ms)
    return PullResult(
        messages=[to_message(r, name) for r in iter_records(pulled.records)],
        next_offset=pulled.next_offset,
        min_offset=pulled.min_offset,
        max_offset=pulled.max_offset,
        broker=name,
    )


@router.get(
    "/messages/{message_id}",
    operation_id="getMessage",
    response_model=Message,
    responses=problem_responses(MessageNotFound),
)
async def get_message(ctx: Context, message_id: MessageId, request: Request) -> Message:
    """The message with this id, as stored in its topic.

    Only the message in the topic it was sent to is answered, never a copy in a system topic:
    a scheduled message is found once it is due, a transaction's once committed, and a retried
    or dead-lettered one is answered as first stored (its dead letters: /v1/groups/{group}/dlq).
    """
    params = _stored_between(ctx, message_id) | {"public": "true"}
    found: list[Message] = []
    for name, _, raw in await ask_every_broker(ctx, lambda n, a: ctx.brokers.query_id(n, a, message_id, params)):
        found.extend(to_message(r, name) for r in iter_records(raw))
    missing = MessageNotFound(
        f"no broker holds a message with id {message_id} in its topic"
        " (a scheduled message is found once it is due, a transaction's once it is committed)"
    )
    if not found:
        raise missing
    message = min(found, key=lambda m: m.stored_at)
    reveal(request, (SUB,), "topic", message.topic, missing)  # a topic the key may not read: as if missing
    return message


def _stored_between(ctx: GatewayContext, message_id: str) -> dict[str, str | int]:
    """Where a broker looks for an id's records: stored from a minute before the id was made (its time, a clock
    apart) to a minute from now."""
    return {"begin": max(0, id_time(message_id) - 60_000), "end": ctx.now_ms() + 60_000}


@router.get(
    "/messages/{message_id}/trace",
    operation_id="traceMessage",
    response_model=MessageTrace,
    responses=problem_responses(MessageNotFound),
)
async def trace_message(ctx: Context, message_id: MessageId, request: Request) -> MessageTrace:
    """Where the message is stored, whether it was scheduled or half of a transaction, and per group its state
    (waiting, in_flight, acked, retrying, dead_lettered, redriven), attempts, leases, retry and dead-letter copies,
    and each push subscription's attempts, from the brokers' and the push service's own state."""
    traces, unavailable = await trace.broker_traces(ctx, message_id, _stored_between(ctx, message_id))
    found = trace.composed(message_id, traces, unavailable)
    missing = MessageNotFound(f"no broker holds a message with id {message_id}")
    reveal(request, (SUB,), "topic", found.topic, missing)  # a topic the key may not read: as if missing
    principal = principal_of(request)

    def readable(group: str | None) -> bool:  # a group's state is shown to a key that may see its lag
        if group is None:
            return True
        try:
            principal.require((SUB, ADMIN), "group", group)
        except Forbidden:
            return False
        return True

    found.groups = [g for g in found.groups if readable(g.group)]
    found.steps = [step for step in found.steps if readable(step.group)]
    found.push = await trace.push_traces(ctx, found.topic, message_id, readable)
    found.steps.extend(
        trace.TraceStep(
            at=None,
            what="pushed",
            group=p.group,
            detail=f"{p.attempts} push attempt(s), last status {p.last_status}"
            + ("" if p.delivered else f", not acked yet ({p.last_error or 'no answer'})"),
        )
        for p in found.push
    )
    return found


@router.get(
    "/topics/{topic}/messages",
    operation_id="queryMessagesByKey",
    response_model=MessageList,
    responses=problem_responses(InvalidTopicName, ReservedTopicName, InvalidRequest, TopicNotFound, ValidationFailed),
)
async def query_by_key(
    ctx: Context,
    topic: ReadableTopic,
    key: Annotated[str, Query(min_length=1, description="a key the message was sent with")],
    begin: Annotated[str | None, Query(description="RFC 3339 or epoch ms (default: 3 days ago)")] = None,
    end: Annotated[str | None, Query(description="RFC 3339 or epoch ms (default: now)")] = None,
    max: Annotated[int, Query(ge=1, le=64)] = 32,
) -> MessageList:
    """Messages of the topic sent with `key`, stored between begin and end, newest first (a user topic's)."""
    now = ctx.now_ms()
    begin_ms = parse_time_ms(begin, "begin") if begin else now - 72 * 3600 * 1000
    end_ms = parse_time_ms(end, "end") if end else now + 60_000
    if begin_ms > end_ms:
        raise InvalidRequest(f"begin ({begin_ms}) is after end ({end_ms})")
    route = await ctx.routes.get(topic)
    params: dict[str, str | int] = {"topic": topic, "key": key, "begin": begin_ms, "end": end_ms, "max": max}
    answers = await asyncio.gather(
        *(ctx.brokers.query_key(q.broker_name, read_address(route, q.broker_name), params) for q in route.queues)
    )
    messages = [
        to_message(r, q.broker_name)
        for q, answer in zip(route.queues, answers, strict=True)
        for r in iter_records(answer.records)
    ]
    newest = sorted(messages, key=lambda m: m.stored_at, reverse=True)[:max]
    return MessageList(messages=newest, truncated=any(answer.truncated for answer in answers))


def _failed_entry(index: int, exc: PetrelError) -> dict[str, Any]:
    return BatchEntry(index=index, error=entry_error(exc)).model_dump()


def _bind_send(request: Request) -> dict[str, Any]:
    """send_message's and send_batch's arguments, as FastAPI's dependencies would give them (the hot path)."""
    return {
        "ctx": gateway_context(request),
        "topic": validate_topic_name(request.path_params["topic"]),
        "request": request,
        "idempotency_key": request.headers.get("idempotency-key"),
    }


HOT_ROUTES: dict[str, Binder] = {"sendMessage": _bind_send, "sendMessageBatch": _bind_send}
"""Served without FastAPI's request cycle (libs.http.hot_routes)."""


def to_message(record: MessageRecord, broker: str) -> Message:
    return Message(**message_fields(record, broker))


SendRun = Callable[[list[str | None], Pins | None], Awaitable[tuple[dict[str, Any], bool]]]
"""Sends a request's messages with these ids (None: fresh ones); its answer, and whether every outcome is settled."""


async def _idempotent(
    ctx: GatewayContext, request: Request, scope: str, key: str | None, payload: BaseModel, count: int, run: SendRun
) -> Any:
    """Run the send once per Idempotency-Key of the caller's API key (gateway.messages.idempotency): replayed,
    resumed, or released."""
    if key is None:
        return (await run([None] * count, None))[0]
    encoded, api_key_id = payload.model_dump_json().encode(), principal_of(request).key_id
    claim = await ctx.idempotency.claim(scope, key, encoded, count, ctx.records.ids.new_id, api_key_id=api_key_id)
    if claim.replay is not None:
        return claim.replay
    ids: list[str | None] = list(claim.message_ids)
    try:
        async with ctx.idempotency.kept(claim):
            answer, settled = await run(ids, claim)
    except BaseException as exc:
        # Released only when no put of this key can have stored anything: not one an earlier
        # request made (`fixed`), nor one whose outcome is unsure, nor one the record may not name.
        stored_nothing = isinstance(exc, PetrelError) and not (unsettled(exc) or claim.lost or claim.fixed)
        with contextlib.suppress(PetrelError):  # taken over, or Redis gone: the original error is the answer
            await (ctx.idempotency.release(claim) if stored_nothing else ctx.idempotency.suspend(claim))
        raise
    # The answer stands even when it cannot be recorded (taken over, Redis gone): a repeat
    # then resumes the record, and the brokers answer with the copies they hold.
    with contextlib.suppress(PetrelError):
        await (ctx.idempotency.complete(claim, answer) if settled else ctx.idempotency.suspend(claim))
    return answer


def _emit_sent(request: Request, topic: str, prepared: list[Prepared], results: list[Sent], key: str | None) -> None:
    """One `sent` line for the call: the topic (and idempotency key) once, each message's own fields listed."""
    items: list[dict[str, Any]] = []
    for p, r in zip(prepared, results, strict=True):
        item: dict[str, Any] = {"message_id": r.message_id, "size": len(p.encoded)}
        if p.message.tag is not None:
            item["tag"] = p.message.tag
        if p.message.keys:
            item["keys"] = list(p.message.keys)
        items.append(item)
    shared: dict[str, Any] = {"topic": topic} if key is None else {"topic": topic, "idempotency_key": key}
    request.state.events.emit_batch("sent", items, **shared)
