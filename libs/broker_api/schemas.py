"""The JSON bodies of the broker's internal API: topics, puts, offsets, and the timer service's calls."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from libs.topic import DEFAULT_QUEUES, MAX_QUEUES, MessageType, Perm, TopicConfig


class TopicUpdate(BaseModel):
    """`PUT /internal/topics/{topic}`: the fields named change, the others keep their value here (on create,
    `default_queues` queues, READ_WRITE, `default_message_type`); the broker merges them under its topics' lock."""

    model_config = ConfigDict(extra="forbid")

    read_queues: int | None = Field(default=None, ge=1, le=MAX_QUEUES)
    write_queues: int | None = Field(default=None, ge=1, le=MAX_QUEUES)
    perm: int | None = Field(default=None, ge=0, le=7)
    message_type: MessageType | None = None
    default_queues: int = Field(default=DEFAULT_QUEUES, ge=1, le=MAX_QUEUES, description="a new topic's queues")
    default_message_type: MessageType = Field(
        default=MessageType.NORMAL, description="a new topic's type (another broker's, when it holds the topic)"
    )
    create_only: bool = Field(default=False, description="412 already-exists when the topic exists here")

    def merged(self, name: str, old: TopicConfig | None) -> TopicConfig:
        """The topic as this change leaves it, from what the broker holds (None: nothing yet)."""
        base = old or TopicConfig(
            name, self.default_queues, self.default_queues, Perm.READ_WRITE, self.default_message_type
        )
        return TopicConfig(
            name,
            base.read_queues if self.read_queues is None else self.read_queues,
            base.write_queues if self.write_queues is None else self.write_queues,
            base.perm if self.perm is None else self.perm,
            base.message_type if self.message_type is None else self.message_type,
        )


class BrokerTopic(BaseModel):
    topic: str
    broker_name: str
    read_queues: int
    write_queues: int
    perm: int
    message_type: MessageType
    created: bool = Field(default=False, description="true when this call created the topic")

    def to_config(self) -> TopicConfig:
        return TopicConfig(self.topic, self.read_queues, self.write_queues, self.perm, self.message_type)

    @classmethod
    def of(cls, config: TopicConfig, broker_name: str, created: bool = False) -> BrokerTopic:
        return cls(
            topic=config.name,
            broker_name=broker_name,
            read_queues=config.read_queues,
            write_queues=config.write_queues,
            perm=config.perm,
            message_type=config.message_type,
            created=created,
        )


class BrokerTopicList(BaseModel):
    topics: list[BrokerTopic]


class BrokerIdentity(BaseModel):
    cluster: str
    broker_name: str
    broker_id: int
    address: str
    data_version: int
    nameservers: dict[str, bool] = Field(description="nameserver -> registered with it now")


class PutEntry(BaseModel):
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    store_timestamp: int
    message_id: str | None
    deliver_at: int | None = Field(default=None, description="for a scheduled message: when it is due (ms)")


class PutFailure(BaseModel):
    index: int = Field(description="the first record not stored; the ones after it were not tried")
    type: str
    status: int
    detail: str


class PutAnswer(BaseModel):
    stored: list[PutEntry]
    failure: PutFailure | None = None
    not_durable: str | None = Field(
        default=None,
        description="SYNC_FLUSH: why the disk did not confirm the stored records in time (flush-timeout); "
        "they are stored and must not be sent again",
    )


class QueueOffsets(BaseModel):
    min_offset: int
    max_offset: int
    offset_for_timestamp: int | None = None


class ConsumerOffset(BaseModel):
    topic: str
    queue_id: int
    offset: int


class ConsumerOffsetList(BaseModel):
    offsets: list[ConsumerOffset]


class ConsumerOffsetCommit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    offset: int = Field(ge=0)


class ExpectedRecord(BaseModel):
    """What the timer knows of a due scheduled record: the broker delivers the record at its offset only if it is it."""

    model_config = ConfigDict(extra="forbid")

    message_id: str | None = Field(
        default=None, description="its message id; when the offset holds another, the message is looked up by it"
    )
    size: int | None = Field(default=None, ge=1, description="its stored size")
    due_ms: int | None = Field(default=None, description="its due time: which of the message's scheduled copies")


class DeliveryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    physical_offsets: list[int] = Field(min_length=1, max_length=1024, description="scheduled records now due")
    expected: list[ExpectedRecord] | None = Field(
        default=None,
        max_length=1024,
        description="one per offset, in order: what each record must be (issue 27: after a failover the new "
        "master's log may hold another message at an offset); none: only that each is a scheduled record",
    )

    @model_validator(mode="after")
    def _one_expected_per_offset(self) -> DeliveryRequest:
        if self.expected is not None and len(self.expected) != len(self.physical_offsets):
            raise ValueError("expected must hold one entry per physical offset")
        return self


class DeliveryResult(BaseModel):
    physical_offset: int
    status: str = Field(
        description="delivered (stored in its topic, or stored there before: see duplicate; a flush timeout "
        "counts as stored); refused (this one cannot be delivered, the others are not held back); "
        "lost (the offset holds another message, or none, and the one expected is nowhere in this log: "
        "never to be delivered); "
        "failed (the store refused the write: this one and every later one were not stored)"
    )
    found_at: int | None = Field(
        default=None,
        description="the offset holds another message: the one expected was found here by its id and delivered",
    )
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    message_id: str | None = None
    duplicate: bool = Field(
        default=False,
        description="delivered before (a repeated delivery, a rolled copy's): the copy stored then, not stored again",
    )
    type: str | None = Field(default=None, description="the problem type, when failed")
    detail: str | None = None


class DeliveryResults(BaseModel):
    results: list[DeliveryResult]


class TimerProgressReport(BaseModel):
    """What the timer still needs on this broker, as of its last checkpoint."""

    model_config = ConfigDict(extra="forbid")

    levels: dict[int, int] = Field(description="delay-level queue id -> the next unit the timer reads")
    timer: int = Field(ge=0, description="the next unit of the timer topic the timer reads")
    wheel_offset: int | None = Field(ge=0, description="the lowest CommitLog offset of its wheel's pending entries")


class RetentionAdvice(BaseModel):
    needed_offset: int | None = Field(description="the lowest CommitLog offset kept for the timer (None: none)")
    roll_below: int = Field(description="pending scheduled messages below this offset should be rolled now")
    log_start: int = Field(description="the CommitLog's first offset: records below it are gone, nothing to keep")


class RollResult(BaseModel):
    physical_offset: int
    status: str = Field(
        description="rolled (re-put at the log's end; a flush timeout counts as stored), refused (cannot be), "
        "lost (the offset holds another message than the one expected, which is nowhere in this log), "
        "failed (store refused)"
    )
    new_offset: int | None = Field(default=None, description="where the rolled copy is, when rolled")
    found_at: int | None = Field(
        default=None, description="the offset holds another message: the one expected was found here and rolled"
    )
    message_id: str | None = None
    type: str | None = Field(default=None, description="the problem type, when refused or failed")
    detail: str | None = None


class RollResults(BaseModel):
    results: list[RollResult]


class QueueOffsetsOf(BaseModel):
    queue_id: int
    min_offset: int
    max_offset: int
    max_offset_at_start: int | None = None
    """A schedule queue's end when this broker's store was opened (before any write); None for other topics."""


class TopicOffsets(BaseModel):
    topic: str
    queues: list[QueueOffsetsOf]
    incarnation: str
    """An id of this broker's start: a new one after every restart."""

    def ranges(self) -> dict[int, tuple[int, int]]:
        """Queue id -> (min offset, max offset)."""
        return {q.queue_id: (q.min_offset, q.max_offset) for q in self.queues}

    def ends_at_start(self) -> dict[int, int]:
        """Queue id -> its end when the broker started (schedule queues only)."""
        return {q.queue_id: q.max_offset_at_start for q in self.queues if q.max_offset_at_start is not None}
