"""The broker's metadata tables (SQLAlchemy): SQLite in its store dir by default.

Topics, consumer offsets, the dead letters redriven by id and a slave's copy of its master's
in-place attempt counts (subscription groups join them with consumer groups).
Calls are synchronous: the app runs them in a worker thread.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Engine, Integer, MetaData, String, delete, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from libs.metadata_db import open_engine as open_metadata_engine
from libs.topic import MessageType, TopicConfig


class Base(DeclarativeBase):
    metadata = MetaData()


class TopicRow(Base):
    __tablename__ = "topics"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    read_queues: Mapped[int] = mapped_column(Integer)
    write_queues: Mapped[int] = mapped_column(Integer)
    perm: Mapped[int] = mapped_column(Integer)
    message_type: Mapped[str] = mapped_column(String(16))


class ConsumerOffsetRow(Base):
    __tablename__ = "consumer_offsets"

    group: Mapped[str] = mapped_column(String(255), primary_key=True)
    topic: Mapped[str] = mapped_column(String(255), primary_key=True)
    queue_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    offset: Mapped[int] = mapped_column(BigInteger)


def open_engine(url: str) -> Engine:
    """The broker's metadata database, its tables created (topics, offsets, groups, subscriptions)."""
    return open_metadata_engine(url, Base.metadata)


class TopicStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def load(self) -> list[TopicConfig]:
        with Session(self.engine) as session:
            rows = session.scalars(select(TopicRow)).all()
            return [
                TopicConfig(r.name, r.read_queues, r.write_queues, r.perm, MessageType(r.message_type)) for r in rows
            ]

    def save(self, config: TopicConfig) -> None:
        row = TopicRow(
            name=config.name,
            read_queues=config.read_queues,
            write_queues=config.write_queues,
            perm=config.perm,
            message_type=config.message_type.value,
        )
        with Session(self.engine) as session, session.begin():
            session.merge(row)

    def remove(self, name: str) -> None:
        with Session(self.engine) as session, session.begin():
            session.execute(delete(TopicRow).where(TopicRow.name == name))


OffsetKey = tuple[str, str, int]
"""(group, topic, queue_id)"""


class OffsetStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def load(self) -> dict[OffsetKey, int]:
        with Session(self.engine) as session:
            rows = session.scalars(select(ConsumerOffsetRow)).all()
            return {(r.group, r.topic, r.queue_id): r.offset for r in rows}

    def save(self, offsets: dict[OffsetKey, int]) -> None:
        with Session(self.engine) as session, session.begin():
            for (group, topic, queue_id), offset in offsets.items():
                session.merge(ConsumerOffsetRow(group=group, topic=topic, queue_id=queue_id, offset=offset))

    def remove_owners(self, owners: set[str]) -> None:
        with Session(self.engine) as session, session.begin():
            session.execute(delete(ConsumerOffsetRow).where(ConsumerOffsetRow.group.in_(owners)))


class RedrivenDeadLetterRow(Base):
    __tablename__ = "redriven_dead_letters"

    group: Mapped[str] = mapped_column(String(255), primary_key=True)
    dlq_offset: Mapped[int] = mapped_column(BigInteger, primary_key=True)


class RedrivenStore:
    """The DLQ offsets a redrive by id sent back, past the group's redrive cursor."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def load(self) -> dict[str, set[int]]:
        with Session(self.engine) as session:
            marks: dict[str, set[int]] = {}
            for row in session.scalars(select(RedrivenDeadLetterRow)).all():
                marks.setdefault(row.group, set()).add(row.dlq_offset)
            return marks

    def change(self, group: str, added: set[int], removed: set[int]) -> None:
        with Session(self.engine) as session, session.begin():
            if removed:
                session.execute(
                    delete(RedrivenDeadLetterRow).where(
                        RedrivenDeadLetterRow.group == group, RedrivenDeadLetterRow.dlq_offset.in_(removed)
                    )
                )
            for offset in added:
                session.merge(RedrivenDeadLetterRow(group=group, dlq_offset=offset))


class InPlaceAttemptRow(Base):
    __tablename__ = "in_place_attempts"

    owner: Mapped[str] = mapped_column(String(255), primary_key=True)
    topic: Mapped[str] = mapped_column(String(255), primary_key=True)
    queue_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    queue_offset: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    failed: Mapped[int] = mapped_column(Integer)


AttemptCounts = dict[OffsetKey, dict[int, int]]
"""(owner, topic, queue id) -> queue offset -> failed attempts."""


class AttemptStore:
    """A slave's copy of its master's in-place attempt counts (FIFO, broadcast): what it counts on if promoted."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def load(self) -> AttemptCounts:
        with Session(self.engine) as session:
            counts: AttemptCounts = {}
            for row in session.scalars(select(InPlaceAttemptRow)).all():
                counts.setdefault((row.owner, row.topic, row.queue_id), {})[row.queue_offset] = row.failed
            return counts

    def replace(self, counts: AttemptCounts) -> None:
        with Session(self.engine) as session, session.begin():
            session.execute(delete(InPlaceAttemptRow))
            for (owner, topic, queue_id), failed in counts.items():
                for queue_offset, count in failed.items():
                    session.add(
                        InPlaceAttemptRow(
                            owner=owner, topic=topic, queue_id=queue_id, queue_offset=queue_offset, failed=count
                        )
                    )
