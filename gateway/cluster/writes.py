"""Where brokers are: master (and, for reads, slave) addresses from routes and listings; writes to every master."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from libs.broker_api.fanout import cancel_all, failure_of_all
from libs.broker_api.schemas import BrokerTopic
from libs.errors import (
    AlreadyExists,
    BrokerUnavailable,
    InvalidRequest,
    PetrelError,
    QueuesNotEmpty,
    ServiceUnavailable,
    TopicNotFound,
)
from libs.routing import TopicRoute
from libs.topic import MessageType, Perm, TopicConfig

if TYPE_CHECKING:  # the context holds the Receiver, which uses this module
    from gateway.context import GatewayContext

T = TypeVar("T")


def master_address(route: TopicRoute, broker_name: str, *, or_slave: bool = False) -> str:
    """Where a write of `broker_name` goes: its master; `or_slave` (a read), else a slave, which has its log."""
    broker = route.broker(broker_name)
    address = (broker.reader if or_slave else broker.master) if broker else None
    if address is None:
        gone = "no live master or slave" if or_slave else "no live master"
        raise BrokerUnavailable(f"broker {broker_name} has {gone}", broker=broker_name)
    return address


def read_address(route: TopicRoute, broker_name: str) -> str:
    """Where a read of `broker_name` goes: its master, else (the master gone) a slave."""
    return master_address(route, broker_name, or_slave=True)


async def cluster_masters(ctx: GatewayContext) -> list[tuple[str, str]]:
    """(broker name, master address) of every broker of the gateway's cluster; 503 when there is none."""
    targets = await ctx.nameservers.masters(ctx.settings.cluster)
    if not targets:
        raise ServiceUnavailable(f"no broker of cluster {ctx.settings.cluster!r} is registered with the nameservers")
    return targets


async def on_each(
    targets: list[tuple[str, str]], call: Callable[[str, str], Awaitable[T]]
) -> tuple[list[tuple[str, T]], list[tuple[str, BaseException]]]:
    """Call each (broker, address) at once: (broker, answer)s and (broker, failure)s."""
    results = await asyncio.gather(*(call(name, address) for name, address in targets), return_exceptions=True)
    answers: list[tuple[str, T]] = []
    failed: list[tuple[str, BaseException]] = []
    for (name, _), result in zip(targets, results, strict=True):
        if isinstance(result, BaseException):
            failed.append((name, result))
        else:
            answers.append((name, result))
    return answers, failed


async def on_every_master(
    ctx: GatewayContext, call: Callable[[str, str], Awaitable[T]]
) -> tuple[list[tuple[str, T]], list[tuple[str, BaseException]]]:
    """Call every master of the gateway's cluster at once: (broker, answer)s and (broker, failure)s."""
    return await on_each(await cluster_masters(ctx), call)


def write_failed(what: str, failed: list[tuple[str, BaseException]]) -> PetrelError:
    """The error of a write that some masters did not take: a broker's own 4xx as is, else 503."""
    exc = failed[0][1]
    if isinstance(exc, PetrelError) and exc.status < 500:
        return exc
    return BrokerUnavailable(
        f"{what} could not be written to broker(s) {', '.join(n for n, _ in failed)}: "
        f"{first_detail(failed)}; the call is idempotent, repeat it",
        brokers=[name for name, _ in failed],
    )


def create_only_of(if_none_match: str | None) -> bool:
    """Whether a PUT's If-None-Match makes it create-only: `*` does; any other value is a 400."""
    if if_none_match is None:
        return False
    if if_none_match.strip() != "*":
        raise InvalidRequest("If-None-Match: only * is understood (create only)")
    return True


@dataclass(frozen=True, slots=True)
class QueueHeld:
    broker: str
    queue_id: int
    messages: int


def queues_not_empty(topic: str, held: list[QueueHeld]) -> QueuesNotEmpty:
    """The 409 of a shrink that would hide messages: every queue and its count, and what to do instead."""
    named = ", ".join(f"{h.broker} queue {h.queue_id} holds {h.messages}" for h in held)
    return QueuesNotEmpty(
        f"topic {topic!r} keeps its queues: {named} (messages within retention, which fewer queues would hide); "
        "wait until retention has removed them, or delete the topic",
        queues=[{"broker": h.broker, "queue_id": h.queue_id, "messages": h.messages} for h in held],
    )


async def change_topic(
    ctx: GatewayContext,
    topic: str,
    *,
    queues: int | None,
    message_type: MessageType | None,
    current: TopicConfig | None = None,
    create_only: bool = False,
) -> list[BrokerTopic]:
    """Change only what is not None on every broker, each merging under its own lock (so two changes of different
    fields at once both hold); a broker that lacks the topic creates it as `current` (what the other brokers hold;
    None: the topic is new, with the gateway's default_queues), with what is not None."""
    created_as = current or default_topic(ctx, topic)
    return await _on_every_master_topic(
        ctx,
        topic,
        lambda name, address: ctx.brokers.change_topic(
            name,
            address,
            topic,
            queues=queues,
            message_type=message_type,
            created_as=created_as,
            create_only=create_only,
        ),
    )


async def _on_every_master_topic(
    ctx: GatewayContext, topic: str, call: Callable[[str, str], Awaitable[BrokerTopic]]
) -> list[BrokerTopic]:
    try:
        stored, failed = await on_every_master(ctx, call)
    finally:
        ctx.routes.invalidate(topic)
    held = [
        QueueHeld(name, int(q["queue_id"]), int(q["messages"]))
        for name, exc in failed
        if isinstance(exc, QueuesNotEmpty)
        for q in exc.extensions.get("queues", [])
    ]
    if held:
        raise queues_not_empty(topic, held)
    if failed:
        raise write_failed(f"topic {topic!r}", failed)
    return [answer for _, answer in stored]


async def ensure_topic(ctx: GatewayContext, topic: str) -> None:
    """With auto_create_topics on, a send to an unknown topic creates it (default queues)."""
    try:
        await ctx.routes.get(topic)
    except TopicNotFound:
        if not ctx.settings.auto_create_topics:
            raise
        with contextlib.suppress(AlreadyExists):  # created meanwhile (another gateway): as it is
            await change_topic(ctx, topic, queues=None, message_type=None, create_only=True)


def default_topic(ctx: GatewayContext, name: str) -> TopicConfig:
    queues = ctx.settings.default_queues
    return TopicConfig(name, queues, queues, Perm.READ_WRITE)


def first_detail(failed: list[tuple[str, BaseException]]) -> str:
    exc = failed[0][1]
    return exc.detail if isinstance(exc, PetrelError) else str(exc)


async def first_master_answer(ctx: GatewayContext, call: Callable[[str, str], Awaitable[T]]) -> T:
    """Ask every master of the gateway's cluster at once; the first answer wins.

    A NotFound (e.g. group-not-found) is the answer only when every master says so;
    when some did not answer either, their unavailability is.
    """
    targets = await cluster_masters(ctx)
    tasks = [asyncio.ensure_future(call(name, address)) for name, address in targets]
    failures: list[PetrelError] = []
    try:
        for next_done in asyncio.as_completed(tasks):
            try:
                return await next_done
            except PetrelError as exc:
                failures.append(exc)
    finally:
        await cancel_all(tasks)
    raise failure_of_all(failures)
