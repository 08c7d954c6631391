"""Consumer groups: their configuration and subscriptions, kept through SQLAlchemy.

A group is created by an operator (`PUT /internal/groups/{group}`); a receive
records which topic it consumes with which filter, like a RocketMQ subscription.
Each subscribed topic gets its own queue in the group's retry topic
`%RETRY%{group}`, so a retried message comes back only to receives of its topic.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sqlalchemy import Boolean, Engine, Integer, String, delete, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from libs.broker_api.groups import ConsumeFrom, GroupConfig, GroupUpdate, RetryPolicy, RetryPolicyType
from libs.errors import AlreadyExists, GroupNotFound
from libs.filters import FilterType
from services.broker.metadata import Base


@dataclass(frozen=True, slots=True)
class Subscription:
    group: str
    topic: str
    filter_type: FilterType
    expression: str
    retry_queue_id: int


class GroupRow(Base):
    __tablename__ = "subscription_groups"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    max_retries: Mapped[int] = mapped_column(Integer)
    fifo: Mapped[bool] = mapped_column(Boolean)
    broadcast: Mapped[bool] = mapped_column(Boolean)
    retry_policy: Mapped[str] = mapped_column(String(16))
    retry_initial_ms: Mapped[int] = mapped_column(Integer)
    retry_max_ms: Mapped[int] = mapped_column(Integer)
    fifo_suspend_ms: Mapped[int] = mapped_column(Integer)
    consume_from: Mapped[str] = mapped_column(String(16))


class SubscriptionRow(Base):
    __tablename__ = "subscriptions"

    group: Mapped[str] = mapped_column(String(255), primary_key=True)
    topic: Mapped[str] = mapped_column(String(255), primary_key=True)
    filter_type: Mapped[str] = mapped_column(String(8))
    expression: Mapped[str] = mapped_column(String(4096))
    retry_queue_id: Mapped[int] = mapped_column(Integer)


class GroupStore:
    """Synchronous SQLAlchemy calls; the table runs them in a worker thread."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def load(self) -> tuple[list[GroupConfig], list[Subscription]]:
        with Session(self.engine) as session:
            groups = [_config(r) for r in session.scalars(select(GroupRow)).all()]
            subs = [
                Subscription(r.group, r.topic, FilterType(r.filter_type), r.expression, r.retry_queue_id)
                for r in session.scalars(select(SubscriptionRow)).all()
            ]
        return groups, subs

    def save(self, config: GroupConfig) -> None:
        policy = config.retry_policy
        row = GroupRow(
            name=config.name,
            max_retries=config.max_retries,
            fifo=config.fifo,
            broadcast=config.broadcast,
            retry_policy=policy.type.value,
            retry_initial_ms=policy.initial_ms,
            retry_max_ms=policy.max_ms,
            fifo_suspend_ms=config.fifo_suspend_ms,
            consume_from=config.consume_from.value,
        )
        with Session(self.engine) as session, session.begin():
            session.merge(row)

    def save_subscription(self, sub: Subscription) -> None:
        row = SubscriptionRow(
            group=sub.group,
            topic=sub.topic,
            filter_type=sub.filter_type.value,
            expression=sub.expression,
            retry_queue_id=sub.retry_queue_id,
        )
        with Session(self.engine) as session, session.begin():
            session.merge(row)

    def remove(self, name: str) -> None:
        with Session(self.engine) as session, session.begin():
            session.execute(delete(GroupRow).where(GroupRow.name == name))
            session.execute(delete(SubscriptionRow).where(SubscriptionRow.group == name))


def _config(r: GroupRow) -> GroupConfig:
    return GroupConfig(
        name=r.name,
        max_retries=r.max_retries,
        fifo=r.fifo,
        broadcast=r.broadcast,
        retry_policy=RetryPolicy(
            type=RetryPolicyType(r.retry_policy), initial_ms=r.retry_initial_ms, max_ms=r.retry_max_ms
        ),
        fifo_suspend_ms=r.fifo_suspend_ms,
        consume_from=ConsumeFrom(r.consume_from),
    )


class GroupTable:
    def __init__(self, store: GroupStore) -> None:
        self.store = store
        self._groups: dict[str, GroupConfig] = {}
        self._subscriptions: dict[str, dict[str, Subscription]] = {}
        self._writing = asyncio.Lock()

    async def load(self) -> None:
        groups, subs = await asyncio.to_thread(self.store.load)
        self._groups = {g.name: g for g in groups}
        self._subscriptions = {}
        for sub in subs:
            self._subscriptions.setdefault(sub.group, {})[sub.topic] = sub

    def get(self, name: str) -> GroupConfig:
        config = self._groups.get(name)
        if config is None:
            raise GroupNotFound(f"consumer group {name!r} does not exist; create it with PUT /v1/groups/{name}")
        return config

    def find(self, name: str) -> GroupConfig | None:
        return self._groups.get(name)

    def all(self) -> list[GroupConfig]:
        return sorted(self._groups.values(), key=lambda g: g.name)

    async def put(self, config: GroupConfig) -> bool:
        async with self._writing:
            created = config.name not in self._groups
            if self._groups.get(config.name) != config:
                await asyncio.to_thread(self.store.save, config)
                self._groups[config.name] = config
        return created

    async def change(
        self, name: str, update: GroupUpdate, *, created_as: GroupUpdate | None = None, create_only: bool = False
    ) -> tuple[GroupConfig, bool]:
        """The group as stored and whether it was created: created with the fields `update` names (the rest
        from `created_as`, else their defaults), or changed in only those fields (its `model_fields_set`).

        Read and written under the writers' lock, here on the broker: two changes of different fields
        (from two gateways at once) both hold, which a gateway's read-then-write could not promise.
        `create_only`: AlreadyExists when the group exists.
        """
        async with self._writing:
            old = self._groups.get(name)
            if old is not None and create_only:
                raise AlreadyExists(f"group {name!r} exists (If-None-Match: * creates only)")
            base = old if old is not None else (created_as or GroupUpdate()).to_config(name)
            config = base.model_copy(update={field: getattr(update, field) for field in update.model_fields_set})
            if old != config:
                await asyncio.to_thread(self.store.save, config)
                self._groups[name] = config
        return config, old is None

    async def delete(self, name: str) -> None:
        self.get(name)
        await asyncio.to_thread(self.store.remove, name)
        del self._groups[name]
        self._subscriptions.pop(name, None)

    async def mirror(self, groups: list[GroupConfig], subscriptions: list[Subscription]) -> None:
        """A slave's groups and subscriptions made its master's (each subscription with its retry queue)."""
        for config in groups:
            await self.put(config)
        wanted = {config.name for config in groups}
        for name in [g for g in self._groups if g not in wanted]:
            await self.delete(name)
        async with self._writing:
            for sub in subscriptions:
                if sub.group in self._groups and self.subscription(sub.group, sub.topic) != sub:
                    await asyncio.to_thread(self.store.save_subscription, sub)
                    self._subscriptions.setdefault(sub.group, {})[sub.topic] = sub

    def subscriptions(self, group: str) -> list[Subscription]:
        return sorted(self._subscriptions.get(group, {}).values(), key=lambda s: s.retry_queue_id)

    def subscription(self, group: str, topic: str) -> Subscription | None:
        return self._subscriptions.get(group, {}).get(topic)

    async def subscribe(self, group: str, topic: str, filter_type: FilterType, expression: str) -> Subscription:
        """The group's subscription to `topic`, recorded (or updated: the latest filter wins, as in RocketMQ)."""
        subs = self._subscriptions.setdefault(group, {})
        current = subs.get(topic)
        if current is not None and (current.filter_type, current.expression) == (filter_type, expression):
            return current
        async with self._writing:  # concurrent first receives: one writes, the others see it
            current = subs.get(topic)
            if current is not None and (current.filter_type, current.expression) == (filter_type, expression):
                return current
            queue_id = current.retry_queue_id if current else len(subs)
            sub = Subscription(group, topic, filter_type, expression, queue_id)
            await asyncio.to_thread(self.store.save_subscription, sub)
            subs[topic] = sub
            return sub
