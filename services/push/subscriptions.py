"""SubscriptionStore: the push subscriptions, in the cluster's shared metadata database.

One row per (consumer group, topic). The push service is the only writer (the
gateway asks it, libs.push_api). What a row holds is what an operator set, plus
two facts the push service records: `disabled_reason` (the endpoint answered
410 Gone) and the signing secrets. A rotation keeps the previous secret until
`previous_secret_until`: meanwhile every delivery carries both signatures, as
Standard Webhooks allows. Secrets are stored as given: the database is as
trusted as the cluster's token (as for producer groups).

Calls are synchronous (SQLAlchemy); async callers run them in a worker thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from sqlalchemy import BigInteger, Boolean, Engine, Float, Integer, MetaData, String, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from libs.errors import InvalidRequest, SubscriptionNotFound
from libs.metadata_db import open_engine
from libs.producer_groups import MAX_URL_LENGTH, validate_signing_secret
from libs.push_api.schemas import PayloadFormat, SubscriptionRequest
from libs.webhooks import new_secret

MAX_REASON: Final = 500


class Base(DeclarativeBase):
    metadata = MetaData()


class SubscriptionRow(Base):
    __tablename__ = "push_subscriptions"

    group_name: Mapped[str] = mapped_column(String(255), primary_key=True)
    topic: Mapped[str] = mapped_column(String(255), primary_key=True)
    endpoint_url: Mapped[str] = mapped_column(String(MAX_URL_LENGTH))
    filter_type: Mapped[str | None] = mapped_column(String(16), nullable=True)
    expression: Mapped[str | None] = mapped_column(String(4096), nullable=True)
    max_in_flight: Mapped[int] = mapped_column(Integer)
    rate_per_second: Mapped[float | None] = mapped_column(Float, nullable=True)
    timeout_seconds: Mapped[float] = mapped_column(Float)
    payload_format: Mapped[str] = mapped_column(String(32))
    invisible_seconds: Mapped[int] = mapped_column(Integer)
    paused: Mapped[bool] = mapped_column(Boolean)
    disabled_reason: Mapped[str | None] = mapped_column(String(MAX_REASON), nullable=True)
    signing_secret: Mapped[str] = mapped_column(String(128))
    previous_secret: Mapped[str | None] = mapped_column(String(128), nullable=True)
    previous_secret_until: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[int] = mapped_column(BigInteger)


@dataclass(frozen=True, slots=True)
class Subscription:
    group: str
    topic: str
    endpoint_url: str
    filter_type: str | None
    expression: str | None
    max_in_flight: int
    rate_per_second: float | None
    timeout_seconds: float
    payload_format: PayloadFormat
    invisible_seconds: int
    paused: bool
    disabled_reason: str | None
    signing_secret: str = field(repr=False)
    previous_secret: str | None = field(repr=False)
    previous_secret_until: int | None
    created_at: int
    updated_at: int

    @property
    def key(self) -> tuple[str, str]:
        return self.group, self.topic

    @property
    def delivering(self) -> bool:
        """Neither paused nor disabled."""
        return not self.paused and self.disabled_reason is None

    def signing_secrets(self, now_ms: int) -> list[str]:
        """The secrets that sign a delivery now: the current one, and the previous one during an overlap."""
        if self.previous_secret and self.previous_secret_until is not None and now_ms < self.previous_secret_until:
            return [self.signing_secret, self.previous_secret]
        return [self.signing_secret]


def open_subscription_engine(url: str) -> Engine:
    """An engine for the shared metadata database at `url`, with the subscription table created."""
    return open_engine(url, Base.metadata)


class SubscriptionStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def find(self, group: str, topic: str) -> Subscription | None:
        with Session(self.engine) as session:
            row = session.get(SubscriptionRow, (group, topic))
            return None if row is None else _subscription(row)

    def get(self, group: str, topic: str) -> Subscription:
        found = self.find(group, topic)
        if found is None:
            raise SubscriptionNotFound(
                f"group {group!r} has no push subscription to topic {topic!r}: "
                f"create it with PUT /v1/groups/{group}/subscriptions/{topic}"
            )
        return found

    def list(self, group: str | None = None) -> list[Subscription]:
        """Every subscription (of `group`), by group then topic."""
        with Session(self.engine) as session:
            query = select(SubscriptionRow)
            if group is not None:
                query = query.where(SubscriptionRow.group_name == group)
            found = [_subscription(r) for r in session.scalars(query)]
        return sorted(found, key=lambda s: s.key)

    def put(
        self, group: str, topic: str, request: SubscriptionRequest, now_ms: int | None = None
    ) -> tuple[Subscription, bool]:
        """Create or replace; answers the subscription and whether it was created.

        A new subscription gets a generated secret unless one is given; an existing one keeps its secrets
        unless one is given (then the old ones no longer sign). A PUT enables a disabled subscription again
        and leaves a paused one paused.
        """
        if request.signing_secret is not None:
            validate_signing_secret(request.signing_secret)
        now = _now(now_ms)
        try:
            return self._put(group, topic, request, now)
        except IntegrityError:  # created meanwhile by another writer: now it is an update
            return self._put(group, topic, request, now)

    def _put(self, group: str, topic: str, request: SubscriptionRequest, now: int) -> tuple[Subscription, bool]:
        with Session(self.engine) as session, session.begin():
            row = session.get(SubscriptionRow, (group, topic), with_for_update=True)
            created = row is None
            if row is None:
                row = SubscriptionRow(
                    group_name=group,
                    topic=topic,
                    paused=False,
                    signing_secret=request.signing_secret or new_secret(),
                    created_at=now,
                )
                session.add(row)
            elif request.signing_secret is not None:
                row.signing_secret = request.signing_secret
                row.previous_secret = row.previous_secret_until = None
            row.endpoint_url = request.endpoint_url
            row.filter_type = request.filter.type.value if request.filter else None
            row.expression = request.filter.expression if request.filter else None
            row.max_in_flight = request.max_in_flight
            row.rate_per_second = request.rate_per_second
            row.timeout_seconds = request.timeout_seconds
            row.payload_format = request.payload_format.value
            row.invisible_seconds = request.invisible_seconds
            row.disabled_reason = None
            row.updated_at = now
            session.flush()
            return _subscription(row), created

    def delete(self, group: str, topic: str) -> None:
        with Session(self.engine) as session, session.begin():
            gone = session.execute(
                delete(SubscriptionRow).where(SubscriptionRow.group_name == group, SubscriptionRow.topic == topic)
            )
        if not getattr(gone, "rowcount", 0):
            self.get(group, topic)  # raises SubscriptionNotFound

    def set_paused(self, group: str, topic: str, paused: bool, now_ms: int | None = None) -> Subscription:
        """Pause or resume; resuming also enables a disabled subscription."""

        def change(row: SubscriptionRow) -> None:
            row.paused = paused
            if not paused:
                row.disabled_reason = None

        return self._change(group, topic, change, now_ms)

    def disable(self, group: str, topic: str, reason: str, now_ms: int | None = None) -> Subscription:
        """Stop deliveries until `:resume` or a PUT (the endpoint answered 410 Gone)."""

        def change(row: SubscriptionRow) -> None:
            row.disabled_reason = reason[:MAX_REASON]

        return self._change(group, topic, change, now_ms)

    def rotate_secret(self, group: str, topic: str, overlap_seconds: int, now_ms: int | None = None) -> Subscription:
        """A new generated secret; the current one keeps signing for `overlap_seconds`."""
        now = _now(now_ms)
        if overlap_seconds < 0:
            raise InvalidRequest("overlap_seconds must not be negative")

        def change(row: SubscriptionRow) -> None:
            row.previous_secret = row.signing_secret if overlap_seconds else None
            row.previous_secret_until = now + overlap_seconds * 1000 if overlap_seconds else None
            row.signing_secret = new_secret()

        return self._change(group, topic, change, now)

    def _change(
        self, group: str, topic: str, change: Callable[[SubscriptionRow], None], now_ms: int | None
    ) -> Subscription:
        with Session(self.engine) as session, session.begin():
            row = session.get(SubscriptionRow, (group, topic), with_for_update=True)
            if row is None:
                raise SubscriptionNotFound(f"group {group!r} has no push subscription to topic {topic!r}")
            change(row)
            row.updated_at = _now(now_ms)
            session.flush()
            return _subscription(row)


def _now(now_ms: int | None) -> int:
    return int(time.time() * 1000) if now_ms is None else now_ms


def _subscription(row: SubscriptionRow) -> Subscription:
    return Subscription(
        group=row.group_name,
        topic=row.topic,
        endpoint_url=row.endpoint_url,
        filter_type=row.filter_type,
        expression=row.expression,
        max_in_flight=row.max_in_flight,
        rate_per_second=row.rate_per_second,
        timeout_seconds=row.timeout_seconds,
        payload_format=PayloadFormat(row.payload_format),
        invisible_seconds=row.invisible_seconds,
        paused=row.paused,
        disabled_reason=row.disabled_reason,
        signing_secret=row.signing_secret,
        previous_secret=row.previous_secret,
        previous_secret_until=row.previous_secret_until,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
