"""The broker's internal data API: put, pull (long polling), reads, queries, consumer offsets.

Hot paths carry records in the shared binary codec (libs.codec), laid end to end:
a put's request body and a pull's or query's answer. Control paths are JSON.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from libs import jsonutil
from libs.broker_api import frames
from libs.broker_api.schemas import (
    ConsumerOffset,
    ConsumerOffsetCommit,
    ConsumerOffsetList,
    PutAnswer,
    QueueOffsets,
)
from libs.broker_api.trace import TraceAnswer
from libs.broker_api.wire import BINARY, TRUNCATED
from libs.codec import encode_record, peek_head
from libs.errors import InvalidRequest, MalformedBody, PetrelError, QueueNotFound, TopicNotFound
from libs.filters import FilterLimits, FilterType, MessageFilter, compile_filter
from libs.http.app import binary_body
from libs.http.disconnect import client_gone
from libs.http.hot_routes import Binder
from libs.message import Prop
from libs.names import is_public_topic
from libs.problem import PROBLEM_RESPONSES
from libs.store.batch_heads import HALF, SCHEDULED, BatchHeads, read_heads
from libs.store.message_store import PullResult, PutOutcome
from libs.store.results import stored_entries
from services.broker.context import Context, broker_context
from services.broker.schedule import schedule_batch
from services.broker.trace import trace

router = APIRouter(prefix="/internal", tags=["messages"], responses=PROBLEM_RESPONSES)

BINARY_BODY = {"content": {BINARY: {"schema": {"type": "string", "format": "binary"}}}}


@router.post(
    "/messages",
    operation_id="putMessages",
    response_model=PutAnswer,
    openapi_extra=binary_body(BINARY),
)
async def put_messages(ctx: Context, request: Request) -> Response:
    """Store records (the binary codec, end to end) in order; under SYNC_FLUSH, once on disk."""
    body = await request.body()
    if not body:
        raise InvalidRequest("the body holds no record")
    scheduled: dict[int, int] = {}
    heads = read_heads(body)  # once: the store takes them as they are when nothing is kept back
    held = check_destinations(ctx, heads)
    if held & HALF:
        body = ctx.transactions.to_half_batch(body)
    try:
        if held & SCHEDULED:
            body, scheduled = schedule_batch(body, ctx.settings.delay_levels)
            outcome = await ctx.store.put_reporting(body, dedupe=True)
            _emit_scheduled(request, body, outcome, scheduled)
        else:
            outcome = await ctx.store.put_reporting(body, dedupe=True, heads=heads)  # a half batch: read anew
    except PetrelError as exc:
        if exc.extensions.get("maybe_stored"):  # appended, then refused: say where, as a stored answer would
            _where_refused(exc, ctx.settings.broker_name, scheduled)
        raise
    _emit_stored(request, ctx, outcome)
    return Response(jsonutil.dumps(answer_put(outcome, scheduled)), media_type="application/json")


def _where_refused(refusal: PetrelError, broker: str, scheduled: dict[int, int]) -> None:
    """A refusal of records already appended (libs.store.results.refused_after_append) names this broker, and
    when its kept-back records are due."""
    refusal.extensions["broker"] = broker
    for index, entry in enumerate(refusal.extensions.get("stored") or ()):
        if index in scheduled and entry.get("deliver_at") is None:
            entry["deliver_at"] = scheduled[index]


def _bind_put(request: Request) -> dict[str, Any]:
    """put_messages's arguments, as FastAPI would give them (the hot path)."""
    return {"ctx": broker_context(request), "request": request}


HOT_ROUTES: dict[str, Binder] = {"putMessages": _bind_put}
"""Served without FastAPI's request cycle (libs.http.hot_routes)."""


def _emit_stored(request: Request, ctx: Context, outcome: PutOutcome) -> None:
    """One `stored` line for the put: the broker, flush mode (and topic, when one) once, each record's own fields."""
    shared: dict[str, Any] = {"broker": ctx.settings.broker_name, "flush": ctx.settings.flush_mode.value}
    if outcome.not_durable is not None:  # SYNC_FLUSH, the sync timed out
        shared["durable"] = False
    stored = [r for r in outcome.stored if not r.duplicate]
    if not stored:
        return
    topic = stored[0].topic
    one_topic = all(r.topic == topic for r in stored)
    if one_topic:
        shared["topic"] = topic
    items: list[dict[str, Any]] = []
    for r in stored:
        item = {
            "message_id": r.message_id,
            "queue_id": r.queue_id,
            "queue_offset": r.queue_offset,
            "size": r.size,
            "physical_offset": r.physical_offset,
        }
        if not one_topic:
            item["topic"] = r.topic
        items.append(item)
    request.state.events.emit_batch("stored", items, **shared)


def check_destinations(ctx: Context, read: BatchHeads) -> int:
    """Every record's topic and queue exist here, and every record can be read (else the first that does not or
    cannot: TopicNotFound, QueueNotFound, MalformedBody); which kinds of kept-back records there are (HALF,
    SCHEDULED: libs.store.batch_heads)."""
    if not all(_writable(ctx, topic, queue_id) for topic, queue_id in read.queues):  # each queue once
        for index, head in enumerate(read.heads):  # the first record refused
            topic, queue_id = head[1]
            config = ctx.topics.find(topic)
            if config is None:
                raise TopicNotFound(f"record {index}: topic {topic!r} does not exist on this broker", index=index)
            if not _writable(ctx, topic, queue_id):
                raise QueueNotFound(
                    f"record {index}: {topic} has no writable queue {queue_id} here (0 to {config.write_queues - 1})",
                    index=index,
                )
    if read.failure is not None:  # the caller's bytes, not the store's: a 400, not CorruptRecord's 500
        index, offset = len(read.heads), read.failure.offset
        raise MalformedBody(
            f"record {index} (byte {offset} of the body): {read.failure.reason}", index=index, offset=offset
        )
    return read.held


def _writable(ctx: Context, topic: str, queue_id: int) -> bool:
    config = ctx.topics.find(topic)
    return config is not None and config.writable and 0 <= queue_id < config.write_queues


def _emit_scheduled(request: Request, body: bytes, outcome: PutOutcome, scheduled: dict[int, int]) -> None:
    events = request.state.events
    stored = len(outcome.stored)
    offset = index = 0
    while offset < len(body) and index < stored:
        head = peek_head(body, offset)
        if index in scheduled and not outcome.stored[index].duplicate:
            level = head.properties.get(Prop.DELAY_LEVEL)
            optional = {"delay_level": int(level)} if level else {}
            events.emit(
                "delay_scheduled",
                message_id=head.properties.get(Prop.UNIQ_KEY),
                topic=head.properties.get(Prop.REAL_TOPIC),
                deliver_at=int(head.properties.get(Prop.TIMER_DELIVER_MS, "0")),
                **optional,
            )
        offset += head.total_size
        index += 1


def answer_put(outcome: PutOutcome, scheduled: dict[int, int]) -> dict[str, object]:
    """A PutAnswer as plain data: built by hand on this hot path (a model would cost more than the store).

    A flush timeout is answered 200 with the stored records and `not_durable`, never as an
    error: the records are in the CommitLog, and a producer that took it for "not stored"
    would send them again (RocketMQ answers FLUSH_DISK_TIMEOUT as a send status, not a failure).
    """
    if outcome.failure is not None and not outcome.stored:
        raise outcome.failure
    failure = None
    if outcome.failure is not None:
        exc = outcome.failure
        failure = {"index": len(outcome.stored), "type": exc.problem_type(), "status": exc.status, "detail": exc.detail}
    not_durable = outcome.not_durable.detail if outcome.not_durable is not None else None
    return {"stored": stored_entries(outcome.stored, scheduled), "failure": failure, "not_durable": not_durable}


def _filter(tag: str | None, sql: str | None, limits: FilterLimits) -> MessageFilter | None:
    if tag and sql:
        raise InvalidRequest("give either a tag or an sql filter, not both")
    if sql:
        return compile_filter(FilterType.SQL92, sql, limits)
    if tag and tag.strip() != "*":
        return compile_filter(FilterType.TAG, tag, limits)
    return None


def offset_headers(result: PullResult) -> dict[str, str]:
    """Where the next read starts and the queue's bounds, beside a binary answer."""
    return frames.offset_headers(result.next_offset, result.min_offset, result.max_offset)


def check_queue(ctx: Context, topic: str, queue_id: int) -> None:
    """The topic exists here and has this queue; else a clear 404."""
    config = ctx.topics.get(topic)
    if not 0 <= queue_id < max(config.read_queues, config.write_queues):
        raise QueueNotFound(f"{topic} has no queue {queue_id} on this broker (0 to {config.read_queues - 1})")


@router.get(
    "/topics/{topic}/queues/{queue_id}/messages",
    operation_id="pullMessages",
    response_class=Response,
    responses={200: BINARY_BODY},
)
async def pull_messages(
    ctx: Context,
    request: Request,
    topic: str,
    queue_id: int,
    offset: Annotated[int, Query(ge=0)],
    max: Annotated[int, Query(ge=1, le=1024)] = 32,
    wait_ms: Annotated[int, Query(ge=0)] = 0,
    tag: str | None = None,
    sql: str | None = None,
) -> Response:
    """Records from `offset` on that match the filter; with `wait_ms`, held until one arrives.

    A filter that matches little is read for at most `filter_scan_max_units` units: then the
    answer holds what was found (perhaps nothing) and the next offset to go on from.
    """
    check_queue(ctx, topic, queue_id)
    settings = ctx.settings
    message_filter = _filter(tag, sql, settings.filter_limits())
    budget = settings.filter_scan_budget()
    result = await ctx.store.pull_in_slices(topic, queue_id, offset, max, message_filter, budget)
    wait = min(wait_ms, settings.max_pull_wait_ms) / 1000
    caught_up = not result.records and result.next_offset >= result.max_offset
    if caught_up and wait > 0:
        async with client_gone(request) as gone:
            if await ctx.waiters.wait(topic, queue_id, message_filter, wait, gone) and not gone.done():
                next_offset = result.next_offset
                result = await ctx.store.pull_in_slices(topic, queue_id, next_offset, max, message_filter, budget)
    return Response(b"".join(result.records), media_type=BINARY, headers=offset_headers(result))


@router.get("/topics/{topic}/queues/{queue_id}/offsets", operation_id="getQueueOffsets", response_model=QueueOffsets)
async def get_queue_offsets(
    ctx: Context, topic: str, queue_id: int, timestamp: Annotated[int | None, Query(ge=0)] = None
) -> QueueOffsets:
    """The queue's min and max offsets; with `timestamp` (ms), the first offset stored at or after it."""
    check_queue(ctx, topic, queue_id)
    low, high = ctx.store.queue_offsets(topic, queue_id)
    at = ctx.store.offset_for_time(topic, queue_id, timestamp) if timestamp is not None else None
    return QueueOffsets(min_offset=low, max_offset=high, offset_for_timestamp=at)


@router.get(
    "/commitlog/{physical_offset}", operation_id="getRecord", response_class=Response, responses={200: BINARY_BODY}
)
async def get_record(ctx: Context, physical_offset: int) -> Response:
    """The record stored at a CommitLog offset."""
    return Response(ctx.store.read(physical_offset), media_type=BINARY)


@router.get("/messages", operation_id="queryMessagesByKey", response_class=Response, responses={200: BINARY_BODY})
async def query_by_key(
    ctx: Context,
    topic: str,
    key: str,
    begin: Annotated[int, Query(ge=0)] = 0,
    end: Annotated[int, Query(ge=0)] = 2**62,
    max: Annotated[int, Query(ge=1, le=64)] = 32,
) -> Response:
    """Records of `topic` carrying `key`, stored within [begin, end] (ms), newest first.

    At most `key_query_max_entries` index entries are read; past them the answer holds what
    was found, with the header x-petrel-truncated: true.
    """
    found = await ctx.store.query_key_in_slices(topic, key, begin, end, max, ctx.settings.key_query_budget())
    headers = {TRUNCATED: "true"} if found.truncated else {}
    return Response(b"".join(encode_record(r) for r in found.records), media_type=BINARY, headers=headers)


@router.get(
    "/messages/by-id/{message_id}",
    operation_id="queryMessageById",
    response_class=Response,
    responses={200: BINARY_BODY},
)
async def query_by_id(
    ctx: Context,
    message_id: str,
    begin: Annotated[int, Query(ge=0)] = 0,
    end: Annotated[int, Query(ge=0)] = 2**62,
    public: Annotated[
        bool, Query(description="only copies in user topics: no half, scheduled, retry or dead-letter copy")
    ] = False,
) -> Response:
    """Every stored record with this message id (a retried message appears more than once)."""
    records = ctx.store.query_id(message_id, begin, end, where=is_public_topic if public else None)
    return Response(b"".join(encode_record(r) for r in records), media_type=BINARY)


@router.get("/messages/by-id/{message_id}/trace", operation_id="traceMessage", response_model=TraceAnswer)
async def trace_message(
    ctx: Context,
    message_id: str,
    begin: Annotated[int, Query(ge=0)] = 0,
    end: Annotated[int, Query(ge=0)] = 2**62,
) -> TraceAnswer:
    """Every copy of the message here, and each group's position at the copies it reads (services.broker.trace)."""
    return trace(ctx.pop, message_id, begin, end)


@router.get("/consumer-offsets/{group}", operation_id="listConsumerOffsets", response_model=ConsumerOffsetList)
async def list_consumer_offsets(ctx: Context, group: str) -> ConsumerOffsetList:
    """The group's committed offsets on this broker."""
    return ConsumerOffsetList(
        offsets=[
            ConsumerOffset(topic=t, queue_id=q, offset=o) for (t, q), o in sorted(ctx.offsets.of_group(group).items())
        ]
    )


@router.put(
    "/consumer-offsets/{group}/{topic}/{queue_id}", operation_id="commitConsumerOffset", response_model=ConsumerOffset
)
async def commit_consumer_offset(
    ctx: Context, group: str, topic: str, queue_id: int, body: ConsumerOffsetCommit
) -> ConsumerOffset:
    """Commit the group's offset for one queue (persisted within a few seconds)."""
    check_queue(ctx, topic, queue_id)
    ctx.offsets.commit(group, topic, queue_id, body.offset)
    return ConsumerOffset(topic=topic, queue_id=queue_id, offset=body.offset)
