"""A group's dead letters as a key may see them: peek and redrive only those of topics it may use.

A group's DLQ holds the dead letters of every topic the group consumed, and a key
may hold the group without holding each of those topics. A peek shows bodies, so it
answers only dead letters of topics the key may subscribe to (`PEEK`). A redrive sends
messages back to the group's consumers of their topic, as an offset reset does, so it
needs what a reset needs: admin on the group (the route's check) and subscribe or
admin on the topic (`REDRIVE`). The others are left in the DLQ and answered as missing
ones are: a redrive by id names them in `not_found`, a peek leaves them out.

A key that may redrive on every topic (and everyone, when auth is off) takes the
brokers' own redrive, which moves the DLQ's cursor. A narrower key reads each
broker's DLQ as a peek does, chooses what it may send, and redrives those by id (the
broker marks them, and the cursor does not pass what is left); its `remaining` counts
only what it may redrive.
"""

from __future__ import annotations

from typing import Any, Final

from gateway.auth.needs import ADMIN, SUB
from gateway.auth.principal import Principal
from gateway.cluster.writes import cluster_masters
from gateway.context import GatewayContext
from gateway.edge.records import message_fields, sent_to
from gateway.groups.schemas import DeadLetter, RedriveRequest, RedriveResult
from libs.broker_api.consume import RedriveBody
from libs.broker_api.fanout import failure_of_all
from libs.codec import iter_records
from libs.errors import NotFound, PetrelError
from libs.message import MessageRecord, Prop

PEEK: Final = (SUB,)
REDRIVE: Final = (SUB, ADMIN)
SCAN_PAGE: Final = 256
"""dead letters read at a time when choosing what a narrow key may redrive (the brokers' peek limit)"""
IDS_PER_CALL: Final = 10_000
"""ids in one redrive call to a broker (its RedriveBody's limit)"""


def dead_letter(record: MessageRecord, broker: str) -> DeadLetter:
    return DeadLetter(
        **message_fields(record, broker),
        original_topic=sent_to(record),
        attempts=record.reconsume_times + 1,
        reason=record.properties.get(Prop.DLQ_REASON),
        dead_lettered_at=record.store_timestamp,
    )


def readable(principal: Principal, records: bytes, broker: str) -> list[DeadLetter]:
    """The dead letters of a peeked batch whose topic the key may subscribe to."""
    return [dead_letter(r, broker) for r in iter_records(records) if principal.may(PEEK, "topic", sent_to(r))]


async def redrive(
    ctx: GatewayContext, principal: Principal, group: str, spec: RedriveRequest
) -> tuple[RedriveResult, list[tuple[str, BaseException]]]:
    """Redrive on each master in turn (max_messages and per_second hold for the whole call); the brokers that failed."""
    targets = await cluster_masters(ctx)
    narrow = not principal.may_all(REDRIVE, "topic")
    result = RedriveResult(redriven=0, message_ids=[], not_found=list(spec.message_ids or []), remaining=0)
    failed: list[tuple[str, BaseException]] = []
    for name, address in targets:
        budget = spec.max_messages - result.redriven
        if budget <= 0:
            break
        try:
            if narrow:
                redriven, missing, remaining = await _narrow(ctx, principal, name, address, group, spec, budget)
            else:
                body = RedriveBody(message_ids=spec.message_ids, max_messages=budget, per_second=spec.per_second)
                answer = await ctx.brokers.redrive(name, address, group, body)
                redriven, missing, remaining = answer["redriven"], set(answer["not_found"]), int(answer["remaining"])
        except PetrelError as exc:
            if exc.status < 500 and not isinstance(exc, NotFound):
                raise
            failed.append((name, exc))
            continue
        result.message_ids.extend(redriven)
        result.redriven = len(result.message_ids)
        result.remaining += remaining
        result.not_found = [i for i in result.not_found if i in missing]
    if len(failed) == len(targets):
        raise failure_of_all(e for _, e in failed)
    return result, failed


async def _narrow(
    ctx: GatewayContext,
    principal: Principal,
    broker: str,
    address: str,
    group: str,
    spec: RedriveRequest,
    budget: int,
) -> tuple[list[str], set[str], int]:
    """(redriven, ids not found here, dead letters the key may redrive still here) of one broker, for a key
    that may redrive on some topics only: the ones it may, chosen from the DLQ, redriven by id."""
    permitted = await _permitted(ctx, principal, broker, address, group)
    asked = set(spec.message_ids or ())
    chosen = (permitted if spec.message_ids is None else [i for i in permitted if i in asked])[:budget]
    redriven: list[str] = []
    for start in range(0, len(chosen), IDS_PER_CALL):
        ids = chosen[start : start + IDS_PER_CALL]
        body = RedriveBody(message_ids=ids, max_messages=len(ids), per_second=spec.per_second)
        answer: dict[str, Any] = await ctx.brokers.redrive(broker, address, group, body)
        redriven += answer["redriven"]
    missing = asked - set(redriven)
    return redriven, missing, len(permitted) - len(redriven)


async def _permitted(ctx: GatewayContext, principal: Principal, broker: str, address: str, group: str) -> list[str]:
    """The ids of the dead letters still in the broker's DLQ of `group` that the key may redrive, oldest first."""
    ids: dict[str, None] = {}
    offset = 0
    while True:
        batch = await ctx.brokers.dead_letters(broker, address, group, offset, SCAN_PAGE)
        for record in iter_records(batch.records):
            if record.message_id and principal.may(REDRIVE, "topic", sent_to(record)):
                ids[record.message_id] = None
        if batch.next_offset <= offset or batch.next_offset >= batch.max_offset:
            return list(ids)
        offset = batch.next_offset
