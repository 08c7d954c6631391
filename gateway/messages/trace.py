"""`GET /v1/messages/{id}/trace` composed from the brokers' traces (libs.broker_api.trace) and the push service.

Each broker answers the copies of the message it holds (the original; a scheduled, half, retry
or dead-letter copy) and, per group, where the group stands at each copy it reads. Here they
become, per group, one state: `dead_lettered` (a dead-letter copy, nothing after it), else that
of the newest copy the group reads: `in_flight` (leased), `acked` (done), `retrying` (a retry
copy not yet delivered), `redriven` (back from the dead-letter queue, not yet delivered again),
or `waiting` (not yet delivered). A copy is done once acked or handed on to a retry copy, so the
newest copy's position is the group's. Nothing is read from the nightly files.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gateway.messages.trace_schemas import (
    DeadLetterCopy,
    GroupState,
    GroupTrace,
    MessageTrace,
    PushTrace,
    RetryCopy,
    Scheduled,
    StoredAt,
    TracedTransaction,
    TraceStep,
)

__all__ = ["TraceStep", "broker_traces", "composed", "push_traces"]
from libs.broker_api.trace import CopyModel, GroupPositionModel, TraceAnswer
from libs.errors import MessageNotFound, PetrelError
from libs.message import Prop
from libs.names import SCHEDULE_TOPICS, TRANS_HALF_TOPIC, dlq_topic, is_public_topic, retry_topic

if TYPE_CHECKING:
    from gateway.context import GatewayContext

Located = tuple[str, CopyModel]
"""(broker, copy)"""

PUSH_ATTEMPTS_READ = 256


def when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


async def broker_traces(
    ctx: GatewayContext, message_id: str, params: dict[str, str | int]
) -> tuple[list[tuple[str, TraceAnswer]], list[str]]:
    targets = await ctx.nameservers.readers()
    answers = await asyncio.gather(
        *(ctx.brokers.trace(n, a, message_id, params) for n, a in targets), return_exceptions=True
    )
    found = [(name, a) for (name, _), a in zip(targets, answers, strict=True) if isinstance(a, TraceAnswer)]
    failed = [name for (name, _), a in zip(targets, answers, strict=True) if not isinstance(a, TraceAnswer)]
    return found, failed


def composed(message_id: str, traces: list[tuple[str, TraceAnswer]], unavailable: list[str]) -> MessageTrace:
    copies: list[Located] = sorted(
        ((b, c) for b, t in traces for c in t.copies), key=lambda bc: (bc[1].stored_at, bc[1].queue_offset)
    )
    public = [bc for bc in copies if is_public_topic(bc[1].topic)]
    # a delayed retry waits in the schedule topic too: only a copy bound for a user topic is the send's scheduling
    scheduled_copies = [
        bc
        for bc in copies
        if bc[1].topic in SCHEDULE_TOPICS and is_public_topic(bc[1].properties.get(Prop.REAL_TOPIC, ""))
    ]
    halves = [bc for bc in copies if bc[1].topic == TRANS_HALF_TOPIC]
    candidates = public or scheduled_copies or halves
    if not candidates:
        raise MessageNotFound(f"no broker holds a message with id {message_id}")
    broker, head = candidates[0]
    topic = head.topic if public else head.properties.get(Prop.REAL_TOPIC, head.topic)
    positions = [(b, p) for b, t in traces for p in t.positions]
    groups = sorted({p.group for _, p in positions} | _dead_letter_groups(copies))
    traced = [_group(g, public[0] if public else None, copies, positions) for g in groups]
    return MessageTrace(
        message_id=message_id,
        topic=topic,
        key=head.properties.get(Prop.KEYS) or None,
        tags=head.properties.get(Prop.TAGS),
        born_at=when(head.born_at),
        stored_at=when(head.stored_at),
        stored=StoredAt(broker=broker, queue=head.queue_id, queue_offset=head.queue_offset),
        scheduled=_scheduled(scheduled_copies, bool(public)),
        transaction=(
            TracedTransaction(transaction_id=None, state="committed" if public else "open") if halves else None
        ),
        groups=[g for g, _ in traced],
        push=[],
        steps=_steps(public, scheduled_copies, halves, traced),
        unavailable=unavailable,
    )


def _dead_letter_groups(copies: list[Located]) -> set[str]:
    return {c.topic.removeprefix(dlq_topic("")) for _, c in copies if c.topic.startswith(dlq_topic(""))}


def _scheduled(copies: list[Located], delivered: bool) -> Scheduled | None:
    if not copies:
        return None
    due = copies[0][1].properties.get(Prop.TIMER_DELIVER_MS)
    return Scheduled(due_at=when(int(due)) if due else None, state="delivered" if delivered else "pending")


def _group(
    group: str, original: Located | None, copies: list[Located], positions: list[tuple[str, GroupPositionModel]]
) -> tuple[GroupTrace, list[TraceStep]]:
    retries = [  # in its retry topic, or still in the schedule topic until its delay is over
        (b, c)
        for b, c in copies
        if c.topic == retry_topic(group)
        or (c.topic in SCHEDULE_TOPICS and c.properties.get(Prop.REAL_TOPIC) == retry_topic(group))
    ]
    dead = [c for _, c in copies if c.topic == dlq_topic(group)]
    mine = {(b, p.topic, p.queue_id, p.queue_offset): p for b, p in positions if p.group == group}

    def position_at(located: Located | None) -> GroupPositionModel | None:
        """The group's position at a copy: the same queue and offset on the same broker (each broker has its own
        queues of a topic)."""
        if located is None:
            return None
        broker, copy = located
        return mine.get((broker, copy.topic, copy.queue_id, copy.queue_offset))

    read = ([original] if original else []) + retries
    newest = read[-1] if read else None
    newest_position = position_at(newest)
    dead_letter = dead[-1] if dead else None
    redriven = dead_letter is not None and any(c.stored_at > dead_letter.stored_at for _, c in retries)
    state: GroupState
    if dead_letter is not None and not redriven:
        state = "dead_lettered"
    elif newest_position is None or newest_position.position == "waiting":
        state = "redriven" if redriven else "retrying" if retries else "waiting"
    else:
        state = "in_flight" if newest_position.position == "in_flight" else "acked"
    # a copy for attempt n+1 carries reconsume_times n (the original 0); delivered, it is one more attempt
    delivered = newest_position is not None and newest_position.position != "waiting"
    attempts = (newest[1].reconsume_times if newest else 0) + (1 if delivered else 0)
    if dead_letter is not None and not redriven:
        attempts = max(attempts, dead_letter.reconsume_times)
    at_original = position_at(original)
    trace = GroupTrace(
        group=group,
        consumer_offset=at_original.consumer_offset if at_original else 0,
        state=state,
        attempts=attempts,
        leases_in_flight=sum(1 for p in mine.values() if p.position == "in_flight"),
        retries=[
            RetryCopy(
                topic=c.topic,
                queue=c.queue_id,
                queue_offset=c.queue_offset,
                level=c.reconsume_times,
                stored_at=when(c.stored_at),
            )
            for _, c in retries
        ],
        dead_letter=(
            DeadLetterCopy(
                topic=dead_letter.topic,
                queue=dead_letter.queue_id,
                queue_offset=dead_letter.queue_offset,
                stored_at=when(dead_letter.stored_at),
                reason=dead_letter.properties.get(Prop.DLQ_REASON),
            )
            if dead_letter
            else None
        ),
    )
    steps = [
        TraceStep(
            at=when(c.stored_at),
            what="retry",
            group=group,
            detail=f"attempt {c.reconsume_times} ended (nacked or its lease expired): a retry copy for attempt "
            f"{c.reconsume_times + 1} in {c.topic} queue {c.queue_id}",
        )
        for _, c in retries
    ]
    if dead_letter is not None:
        reason = dead_letter.properties.get(Prop.DLQ_REASON)
        steps.append(
            TraceStep(
                at=when(dead_letter.stored_at),
                what="dead-lettered",
                group=group,
                detail=f"moved to {dead_letter.topic} after {dead_letter.reconsume_times} attempts"
                + (f" ({reason})" if reason else ""),
            )
        )
    final = {
        "acked": "acked: the group is past it",
        "in_flight": f"in flight: leased (attempt {newest_position.attempt if newest_position else 0})",
        "waiting": "waiting: not delivered to the group yet",
        "retrying": "waiting for its retry copy's delivery",
        "redriven": "redriven from the dead-letter queue: waiting for its delivery",
    }
    if state in final:
        steps.append(TraceStep(at=None, what=state.replace("_", " "), group=group, detail=final[state]))
    return trace, steps


def _steps(
    public: list[Located],
    scheduled: list[Located],
    halves: list[Located],
    traced: list[tuple[GroupTrace, list[TraceStep]]],
) -> list[TraceStep]:
    """The message's own steps and each group's timed ones in time order, then the groups' untimed last states."""
    own: list[TraceStep] = []
    for b, c in halves[:1]:
        own.append(TraceStep(at=when(c.stored_at), what="half", group=None, detail=f"a transaction's half on {b}"))
    for b, c in scheduled[:1]:
        own.append(TraceStep(at=when(c.stored_at), what="scheduled", group=None, detail=f"scheduled on {b}"))
    for b, c in public[:1]:
        where = f"stored in {c.topic} on {b}, queue {c.queue_id} at offset {c.queue_offset}"
        own.append(TraceStep(at=when(c.stored_at), what="stored", group=None, detail=where))
    of_groups = [s for _, group_steps in traced for s in group_steps]
    timed = sorted(own + [s for s in of_groups if s.at is not None], key=lambda s: s.at or when(0))
    return timed + [s for s in of_groups if s.at is None]


async def push_traces(
    ctx: GatewayContext, topic: str, message_id: str, readable: Callable[[str], bool]
) -> list[PushTrace]:
    """Each push subscription of the topic's attempts at this message (since the push service started), of the
    groups `readable` accepts."""
    try:
        subscriptions = (await ctx.push.list()).subscriptions
    except PetrelError:
        return []
    traces = []
    for sub in subscriptions:
        if sub.topic != topic or not readable(sub.group):
            continue
        try:
            attempts = [
                a
                for a in (await ctx.push.attempts(sub.group, sub.topic, PUSH_ATTEMPTS_READ)).attempts
                if a.message_id == message_id
            ]
        except PetrelError:
            continue
        traces.append(
            PushTrace(
                group=sub.group,
                subscription=sub.topic,
                attempts=len(attempts),
                last_status=attempts[0].status if attempts else None,
                last_error=attempts[0].error if attempts else None,
                delivered=any(a.outcome == "acked" for a in attempts),
            )
        )
    return traces
