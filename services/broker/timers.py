"""The broker's internal API for the timer service: schedule-queue units, and deliveries by offset."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from libs import jsonutil
from libs.codec import encode_record
from libs.errors import PetrelError
from libs.problem import PROBLEM_RESPONSES
from services.broker.context import Context
from services.broker.messages import BINARY, BINARY_BODY, check_queue, offset_headers
from services.broker.schedule import delivery
from services.broker.schemas import DeliveryRequest, DeliveryResults, QueueOffsetsOf, TopicOffsets

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
) -> Response:
    """ConsumeQueue units (20 bytes: CommitLog offset, size, tag code or due time) from `offset`."""
    check_queue(ctx, topic, queue_id)
    raw, result = ctx.store.units(topic, queue_id, offset, max)
    return Response(raw, media_type=BINARY, headers=offset_headers(result))


@router.get("/topics/{topic}/offsets", operation_id="getTopicOffsets", response_model=TopicOffsets)
async def get_topic_offsets(ctx: Context, topic: str) -> TopicOffsets:
    """Min and max offsets of every queue of the topic here, in one call."""
    config = ctx.topics.get(topic)
    queues = []
    for queue_id in range(max(config.read_queues, config.write_queues)):
        low, high = ctx.store.queue_offsets(topic, queue_id)
        queues.append(QueueOffsetsOf(queue_id=queue_id, min_offset=low, max_offset=high))
    return TopicOffsets(topic=topic, queues=queues)


@router.post("/timers/deliveries", operation_id="deliverScheduled", response_model=DeliveryResults)
async def deliver_scheduled(ctx: Context, body: DeliveryRequest, request: Request) -> Response:
    """Put due scheduled messages (by CommitLog offset) back in their real topics, in order."""
    results: list[dict[str, object]] = [{"physical_offset": o, "status": "pending"} for o in body.physical_offsets]
    records = []
    for entry in results:
        try:
            delivered, due = delivery(ctx.store.read(int(str(entry["physical_offset"]))), ctx.topics)
        except PetrelError as exc:
            entry.update(status="failed", type=exc.problem_type(), detail=exc.detail)
            continue
        records.append((entry, delivered, due))
    if records:
        outcome = await ctx.store.put(b"".join(encode_record(r) for _, r, _ in records))
        now = ctx.store.clock()
        for position, (entry, record, due) in enumerate(records):
            if position < len(outcome.stored):
                stored = outcome.stored[position]
                entry.update(status="delivered", topic=stored.topic, queue_id=stored.queue_id)
                entry.update(queue_offset=stored.queue_offset, message_id=stored.message_id)
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
    return Response(jsonutil.dumps({"results": results}), media_type="application/json")
