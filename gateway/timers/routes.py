"""`/v1` scheduled delivery: timer statistics, and cancelling a message not yet due."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from gateway.auth.needs import ADMIN, PUB
from gateway.auth.principal import reveal
from gateway.auth.route import AuthorizedRoute
from gateway.context import Context
from gateway.edge.message_ids import ask_every_broker, id_time
from gateway.edge.params import MessageId
from gateway.edge.records import sent_to
from libs.codec import iter_records
from libs.delay import due_at
from libs.errors import AlreadyDelivered, MessageNotFound, ServiceUnavailable
from libs.message import Prop
from libs.names import SCHEDULE_TOPIC, TIMER_TOPIC
from libs.problem import problem_responses
from services.timer.schemas import TimerStats

router = APIRouter(prefix="/v1", tags=["timers"], route_class=AuthorizedRoute)


@router.get("/timers/stats", operation_id="getTimerStats", response_model=TimerStats)
async def get_timer_stats(ctx: Context) -> TimerStats:
    """Pending by delay level and in the timer wheel, the next due time, recent lateness."""
    try:
        answer = await ctx.internal.json("GET", f"http://{ctx.settings.timer_address}/internal/stats")
    except ServiceUnavailable as exc:
        raise ServiceUnavailable(
            f"the timer service at {ctx.settings.timer_address} did not answer: {exc.detail}"
        ) from exc
    return TimerStats.model_validate(answer)


@router.delete(
    "/messages/{message_id}/schedule",
    operation_id="cancelScheduledMessage",
    status_code=204,
    responses=problem_responses(MessageNotFound, AlreadyDelivered),
)
async def cancel_schedule(ctx: Context, message_id: MessageId, request: Request) -> Response:
    """Cancel a scheduled message that is not yet due: it will never be delivered."""
    born = id_time(message_id)
    params = {"begin": max(0, born - 60_000), "end": ctx.now_ms() + 60_000}
    found = [
        (broker, record)
        for broker, _, raw in await ask_every_broker(ctx, lambda n, a: ctx.brokers.query_id(n, a, message_id, params))
        for record in iter_records(raw)
    ]
    missing = MessageNotFound(f"no scheduled message has id {message_id}")
    if not found:
        raise missing
    for _, copy in found:  # before anything that tells the message's state: a topic the key may not use is missing
        reveal(request, (PUB, ADMIN), "topic", sent_to(copy), missing)
    if any(r.topic not in (SCHEDULE_TOPIC, TIMER_TOPIC) for _, r in found):
        raise AlreadyDelivered(f"message {message_id} has already been delivered")
    broker, record = found[0]
    if due_at(record) <= ctx.now_ms():
        raise AlreadyDelivered(f"message {message_id} was due at {due_at(record)} and is being delivered")
    try:
        await ctx.internal.json(
            "POST",
            f"http://{ctx.settings.timer_address}/internal/cancellations",
            body={
                "broker": broker,
                "physical_offset": record.physical_offset,
                "level": record.queue_id + 1 if record.topic == SCHEDULE_TOPIC else None,
            },
        )
    except ServiceUnavailable as exc:
        raise ServiceUnavailable(
            f"the timer service did not answer; the message is not cancelled: {exc.detail}"
        ) from exc
    request.state.events.emit(
        "delay_cancelled",
        message_id=message_id,
        topic=record.properties.get(Prop.REAL_TOPIC),
        deliver_at=due_at(record),
    )
    return Response(status_code=204)
