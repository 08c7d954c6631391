"""A group's progress: lag per queue, and resetting its offsets (rewind or skip)."""

from __future__ import annotations

from dataclasses import dataclass

from libs.errors import InvalidRequest, LeaseEnded
from libs.names import retry_topic
from services.broker.consume.pop import PopService, owner_of
from services.broker.consume.window import WindowKey


@dataclass(frozen=True, slots=True)
class QueueLag:
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    lag: int
    in_flight: int
    retry: bool
    client_id: str | None


def group_lag(pop: PopService, group: str) -> list[QueueLag]:
    config = pop.groups.get(group)
    owners = {config.name}
    if config.broadcast:
        owners = {k.owner for k in pop.windows if k.owner.startswith(config.name + "@")}
        owners |= {o for o in pop.offsets.owners() if o.startswith(config.name + "@")}
    keys: list[WindowKey] = []
    for owner in sorted(owners):
        for sub in pop.groups.subscriptions(config.name):
            topic = pop.topics.find(sub.topic)
            if topic is not None:
                keys.extend(WindowKey(owner, topic.name, q) for q in range(topic.read_queues))
            if not config.broadcast and pop.topics.find(retry_topic(config.name)) is not None:
                keys.append(WindowKey(owner, retry_topic(config.name), sub.retry_queue_id))
    return [_lag(pop, key, config.name) for key in keys]


def _lag(pop: PopService, key: WindowKey, group: str) -> QueueLag:
    low, high = pop.store.queue_offsets(key.topic, key.queue_id)
    window = pop.windows.get(key)
    if window is not None:
        consumer = window.committed
    else:
        stored = pop.offsets.get(key.owner, key.topic, key.queue_id)
        consumer = low if stored is None else stored
    consumer = min(max(consumer, low), high)
    client_id = key.owner.partition("@")[2] or None
    return QueueLag(
        key.topic,
        key.queue_id,
        high,
        consumer,
        high - consumer,
        len(window.in_flight) if window else 0,
        key.topic == retry_topic(group),
        client_id,
    )


def reset_offsets(
    pop: PopService, group: str, topic_name: str, client_id: str, timestamp: int | None, offset: int | None
) -> list[tuple[int, int]]:
    """Move the group to `offset`, or to the first message stored at or after `timestamp`, on every queue."""
    if (timestamp is None) == (offset is None):
        raise InvalidRequest("give exactly one of timestamp or offset")
    config = pop.groups.get(group)
    topic = pop.topics.get(topic_name)
    if config.broadcast and not client_id:
        raise InvalidRequest(f"group {group!r} is a broadcast group: name the client_id whose offsets to reset")
    owner = owner_of(config.name, client_id if config.broadcast else "")
    moved = []
    for queue_id in range(topic.read_queues):
        low, high = pop.store.queue_offsets(topic.name, queue_id)
        target = pop.store.offset_for_time(topic.name, queue_id, timestamp) if timestamp is not None else offset
        assert target is not None  # exactly one of them was given
        target = min(max(target, low), high)
        window = pop.window(WindowKey(owner, topic.name, queue_id), config)
        for leased in window.reset(target):
            pop.end_lease(
                leased.lease,
                LeaseEnded,
                f"the group's offsets were reset while offset {leased.offset} "
                "was leased; it will be delivered again if it is past the reset",
            )
        pop.commit(window)
        pop.waiters.notify(topic.name, queue_id)
        moved.append((queue_id, target))
    return moved
