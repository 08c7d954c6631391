"""A consumer group's configuration: its one definition, used by the broker (table and API) and the gateway.

`GroupUpdate` is what a group's owner sets (each field has its default); `GroupConfig`
is that and the group's name, the value the broker keeps (frozen). The gateway's
public models derive from these, adding only their documentation; the broker's
answer (`GroupConfigAnswer`) adds the group's subscriptions.
"""

from __future__ import annotations

import enum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from libs.filters import FilterType

DEFAULT_MAX_RETRIES = 16
FIRST_RETRY_LEVEL = 3
"""As RocketMQ: the first retry waits delay level 3 (10 s), the next level 4, and so on."""


class RetryPolicyType(enum.StrEnum):
    LEVELS = "levels"
    EXPONENTIAL = "exponential"


class ConsumeFrom(enum.StrEnum):
    FIRST = "first"
    LAST = "last"


class RetryPolicy(BaseModel):
    """How long a failed message waits before its next attempt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: RetryPolicyType = Field(
        default=RetryPolicyType.LEVELS,
        description="levels: the delay levels 3, 4, 5 ... (10 s, 30 s, 1 m ... 2 h), as RocketMQ; "
        "exponential: initial_ms, doubled on each attempt, at most max_ms",
    )
    initial_ms: int = Field(
        default=1000, ge=1, le=86_400_000, description="exponential: the wait before the second attempt"
    )
    max_ms: int = Field(
        default=7_200_000,
        ge=1,
        le=30 * 86_400_000,
        description="exponential: the longest wait between attempts; not below initial_ms (else 422)",
    )

    @model_validator(mode="after")
    def _max_not_below_initial(self) -> Self:
        if self.max_ms < self.initial_ms:
            raise ValueError(f"max_ms ({self.max_ms}) is below initial_ms ({self.initial_ms})")
        return self

    def delay(self, failed_attempts: int, levels: tuple[int, ...]) -> tuple[int | None, int | None]:
        """(delay level, delay ms) before the retry after `failed_attempts` failures (1 for the first)."""
        if self.type is RetryPolicyType.LEVELS:
            return min(FIRST_RETRY_LEVEL + failed_attempts - 1, len(levels)), None
        return None, min(self.initial_ms * 2 ** min(failed_attempts - 1, 40), self.max_ms)


class GroupUpdate(BaseModel):
    """A consumer group's settings, as `PUT /internal/groups/{group}` sets them (each has its default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_retries: int = Field(
        default=DEFAULT_MAX_RETRIES,
        ge=0,
        le=10_000,
        description="failed attempts before a message goes to the group's DLQ",
    )
    fifo: bool = Field(
        default=False, description="deliver the messages of one message_group strictly in order, one at a time"
    )
    broadcast: bool = Field(
        default=False, description="every client_id gets every message, with its own offsets (no retries)"
    )
    retry_policy: RetryPolicy = Field(default_factory=RetryPolicy, description="the wait before each retry")
    fifo_suspend_ms: int = Field(
        default=1000, ge=0, le=3_600_000, description="FIFO: how long a failed message waits before it is retried"
    )
    consume_from: ConsumeFrom = Field(
        default=ConsumeFrom.FIRST, description="where a new group starts in each queue: the first or the last message"
    )

    def to_config(self, name: str) -> GroupConfig:
        return GroupConfig(name=name, **{field: getattr(self, field) for field in GroupUpdate.model_fields})


class GroupChange(GroupUpdate):
    """`PUT /internal/groups/{group}`: the fields named change; `created_as` is what a broker that lacks the
    group creates it from (the group as another broker holds it), before the fields named; absent, the defaults."""

    created_as: GroupUpdate | None = None

    def update(self) -> GroupUpdate:
        """Only the fields named, as a GroupUpdate (its `model_fields_set` is theirs)."""
        named = self.model_fields_set - {"created_as"}
        return GroupUpdate.model_validate(self.model_dump(include=named))


class GroupConfig(GroupUpdate):
    """A consumer group's configuration: its name and settings."""

    name: str = Field(description="the group's name")


class SubscriptionModel(BaseModel):
    topic: str
    filter_type: FilterType
    expression: str


class GroupConfigAnswer(GroupConfig):
    """A group as the broker keeps it, and what it subscribes to."""

    subscriptions: list[SubscriptionModel]
    created: bool = False


class GroupConfigList(BaseModel):
    groups: list[GroupConfigAnswer]
