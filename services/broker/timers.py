"""The broker's internal API for the timer service: schedule-queue units, and deliveries by offset."""

from __future__ import annotations

import logging
import struct
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from libs import jsonutil
from libs.broker_api.schemas import (
    DeliveryRequest,
    DeliveryResults,
    ExpectedRecord,
    QueueOffsetsOf,
    RetentionAdvice,
    RollResults,
    TimerProgressReport,
    TopicOffsets,
)
from libs.broker_api.wire import BINARY, UNIT_IDS
from libs.codec import decode_record, encode_record, peek_property
from libs.errors import PetrelError
from libs.message import MessageRecord, Prop, packed_message_id
from libs.names import SCHEDULE_TOPIC
from libs.problem import PROBLEM_RESPONSES
from libs.store.consume_queue import UNIT
from services.broker.context import BrokerContext, Context
from services.broker.messages import BINARY_BODY, check_queue, offset_headers
from services.broker.schedule import delivery, needed_offset, rolled
from services.broker.scheduled_check import Lost

log = logging.getLogger(__name__)

router = APIRouter(prefix="/internal", tags=["timers"], responses=PROBLEM_RESPONSES)


@router.get(
    "/topics/{topic}/queues/{queue_id}/units",
    operation_id="readQueueUnits",
    response_class=Response,
    responses={200: BINARY_BODY},
)
async def read_units(
    ctx: Context,
    topic: str,
    queue_id: int,
    offset: Annotated[int, Query(ge=0)],
    max: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ids: Annotated[bool, Query(description="each unit followed by its message's id in 16 bytes")] = False,
) -> Response:
    """ConsumeQueue units (20 bytes: CommitLog offset, size, tag code or due time) from `offset`."""
    check_queue(ctx, topic, queue_id)
    raw, result = ctx.store.units(topic, queue_id, offset, max)
    headers = offset_headers(result)
    if ids:
        raw = b"".join(unit + packed_message_id(_message_id_at(ctx, physical)) for unit, physical in _units(raw))
        headers[UNIT_IDS] = "true"
    return Response(raw, media_type=BINARY, headers=headers)


def _units(raw: bytes) -> list[tuple[bytes, int]]:
    """Each unit of a units read, and the CommitLog offset it names."""
    return [(raw[i : i + UNIT.size], UNIT.unpack_from(raw, i)[0]) for i in range(0, len(raw), UNIT.size)]


def _message_id_at(ctx: BrokerContext, offset: int) -> str | None:
    """The id of the message at a CommitLog offset (None when it has none, or it cannot be read), read in place:
    its body is not copied."""
    commitlog = ctx.store.commitlog
    if not commitlog.min_offset <= offset < commitlog.write_offset:
        return None
    try:
        segment = commitlog.segment_at(offset)
        return peek_property(segment.map, Prop.UNIQ_KEY, offset - segment.start_offset)
    except (PetrelError, struct.error, ValueError):
        return None


@router.get("/topics/{topic}/offsets", operation_id="getTopicOffsets", response_model=TopicOffsets)
async def get_topic_offsets(ctx: Context, topic: str) -> TopicOffsets:
    """Min and max offsets of every queue of the topic here, in one call."""
    config = ctx.topics.get(topic)
    queues = []
    for queue_id in range(max(config.read_queues, config.write_queues)):
        low, high = ctx.store.queue_offsets(topic, queue_id)
        at_start = ctx.schedule_at_start.ends.get((topic, queue_id))
        queues.append(QueueOffsetsOf(queue_id=queue_id, min_offset=low, max_offset=high, max_offset_at_start=at_start))
    return TopicOffsets(topic=topic, queues=queues, incarnation=ctx.schedule_at_start.incarnation)


@router.post("/timers/deliveries", operation_id="deliverScheduled", response_model=DeliveryResults)
async def deliver_scheduled(ctx: Context, body: DeliveryRequest, request: Request) -> Response:
    """Put due scheduled messages (by CommitLog offset) back in their real topics, in order; a result per offset.

    Idempotent: every delivery of one scheduled record (a timer repeating what it did since its
    last checkpoint, a rolled copy) carries the same DEDUP token (schedule.delivery_token), and
    the store answers the copy it holds instead of storing another (`duplicate`).
    `delivered`: stored in its topic (a SYNC_FLUSH flush timeout too: the record IS stored, it
    must not be put again). `refused`: this one cannot be delivered (no record at
    the offset, its topic is gone ...); the others are not held back. `lost`: the offset holds
    another message than the one `expected`, and it is nowhere in this log (scheduled_check.py;
    found elsewhere, it is delivered from there: `found_at`). `failed`: the store
    refused the write (full, read-only ...): it and every later one were not stored.
    """
    results: list[dict[str, object]] = [{"physical_offset": o, "status": "pending"} for o in body.physical_offsets]
    expected: list[ExpectedRecord | None] = [*body.expected] if body.expected else [None] * len(results)
    records = []
    for entry, wanted in zip(results, expected, strict=True):
        offset = int(str(entry["physical_offset"]))
        try:
            located = ctx.scheduled.locate(offset, wanted)
            if isinstance(located, Lost):
                entry.update(status="lost", detail=located.detail, message_id=wanted.message_id if wanted else None)
                continue
            delivered, due = delivery(located.raw, ctx.topics)
        except PetrelError as exc:
            entry.update(status="refused", type=exc.problem_type(), detail=exc.detail, **_identity(ctx, offset))
            continue
        if located.moved:
            entry["found_at"] = located.physical_offset
        records.append((entry, delivered, due))
    if records:
        await _put(ctx, records, request)
    return Response(jsonutil.dumps({"results": results}), media_type="application/json")


async def _put(ctx: Context, records: list[tuple[dict[str, object], MessageRecord, int]], request: Request) -> None:
    outcome = await ctx.store.put_reporting(b"".join(encode_record(r) for _, r, _ in records), dedupe=True)
    if outcome.not_durable is not None:
        log.warning("timer deliveries stored but not confirmed durable: %s", outcome.not_durable)
    now = ctx.store.clock()
    for position, (entry, record, due) in enumerate(records):
        if position < len(outcome.stored):
            stored = outcome.stored[position]
            entry.update(status="delivered", topic=stored.topic, queue_id=stored.queue_id)
            entry.update(queue_offset=stored.queue_offset, message_id=stored.message_id, duplicate=stored.duplicate)
            if stored.duplicate:
                continue  # fired when it was stored
            request.state.events.emit(
                "delay_fired",
                message_id=record.message_id,
                topic=record.topic,
                deliver_at=due,
                lateness_ms=max(0, int(now * 1000) - due),
            )
        else:
            failure = outcome.failure
            entry.update(status="failed", type=failure.problem_type() if failure else "", detail=str(failure))
            entry.update(topic=record.topic, message_id=record.message_id)


def _identity(ctx: Context, offset: int) -> dict[str, object]:
    """The message id and real topic of the scheduled record at `offset`, as far as it can be read."""
    try:
        record = decode_record(ctx.store.read(offset))
    except PetrelError:
        return {}
    return {"topic": record.properties.get(Prop.REAL_TOPIC, record.topic), "message_id": record.message_id}


@router.post("/timers/progress", operation_id="reportTimerProgress", response_model=RetentionAdvice)
async def report_timer_progress(ctx: Context, body: TimerProgressReport) -> RetentionAdvice:
    """The timer's checkpointed cursors: retention keeps what they still need; answers what to roll now."""
    queues = ctx.topics.get(SCHEDULE_TOPIC).write_queues
    needed = needed_offset(ctx.store, queues, body.levels, body.timer, body.wheel_offset)
    ctx.store.retention.report_needed(needed)
    return RetentionAdvice(
        needed_offset=needed, roll_below=ctx.store.retention.roll_below(), log_start=ctx.store.commitlog.min_offset
    )


@router.post("/timers/rolls", operation_id="rollScheduled", response_model=RollResults)
async def roll_scheduled(ctx: Context, body: DeliveryRequest, request: Request) -> Response:
    """Re-put pending scheduled messages (by CommitLog offset) at the log's end, in the timer topic, due as before.

    Seed 003's roll: the copy's retention starts again. Same message id; the timer
    drops its entry for the old offset once the copy is stored. With `expected`, the record
    at each offset is checked as a delivery's is (scheduled_check.py): the message is rolled
    from where its id finds it (`found_at`), or answered `lost`.
    """
    results: list[dict[str, object]] = []
    records = []
    expected: list[ExpectedRecord | None] = [*body.expected] if body.expected else [None] * len(body.physical_offsets)
    for offset, wanted in zip(body.physical_offsets, expected, strict=True):
        entry: dict[str, object] = {"physical_offset": offset, "status": "pending"}
        results.append(entry)
        try:
            located = ctx.scheduled.locate(offset, wanted)
            if isinstance(located, Lost):
                entry.update(status="lost", detail=located.detail, message_id=wanted.message_id if wanted else None)
                continue
            records.append((entry, rolled(located.raw)))
        except PetrelError as exc:
            entry.update(status="refused", type=exc.problem_type(), detail=exc.detail)
            continue
        if located.moved:
            entry["found_at"] = located.physical_offset
    if records:
        outcome = await ctx.store.put_reporting(b"".join(encode_record(r) for _, r in records))
        if outcome.not_durable is not None:  # stored: rolling it again would only make another copy
            log.warning("rolled scheduled messages stored but not confirmed durable: %s", outcome.not_durable)
        for position, (entry, record) in enumerate(records):
            entry["message_id"] = record.message_id
            if position < len(outcome.stored):
                entry.update(status="rolled", new_offset=outcome.stored[position].physical_offset)
                request.state.events.emit(
                    "delay_rolled",
                    message_id=record.message_id,
                    topic=record.properties.get(Prop.REAL_TOPIC),
                    deliver_at=int(record.properties.get(Prop.TIMER_DELIVER_MS, "0")),
                    roll_times=int(record.properties[Prop.TIMER_ROLL_TIMES]),
                )
            else:
                failure = outcome.failure
                entry.update(status="failed", type=failure.problem_type() if failure else "", detail=str(failure))
    return Response(jsonutil.dumps({"results": results}), media_type="application/json")
