"""The JSON bodies of a broker's transaction API: ending transactions (one or many), their state, renewals."""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from libs.broker_api.wire import MAX_ENDS


class Outcome(enum.StrEnum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


class TransactionState(enum.StrEnum):
    OPEN = "OPEN"
    ABANDONED = "ABANDONED"
    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"


class EndedBy(enum.StrEnum):
    PRODUCER = "producer"
    CHECKBACK = "checkback"
    OPERATOR = "operator"


class EndRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    by: EndedBy = EndedBy.PRODUCER


class EndAnswer(BaseModel):
    message_id: str
    outcome: Outcome
    first: bool = Field(description="false when this repeats an earlier end")
    topic: str
    queue_id: int
    queue_offset: int | None = Field(description="where the committed message is; null for a rollback")


HALF_OFFSET_DESCRIPTION = (
    "where the transaction's first half copy is, as its id says (libs.broker_api.transaction_ids): "
    "read there when it is that copy, else the half is found through the index"
)


class EndEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message_id: str
    outcome: Outcome
    by: EndedBy = EndedBy.PRODUCER
    half_offset: int | None = Field(default=None, ge=0, description=HALF_OFFSET_DESCRIPTION)


class EndBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ends: list[EndEntry] = Field(min_length=1, max_length=MAX_ENDS)


class EndFailure(BaseModel):
    type: str
    status: int
    detail: str
    extensions: dict[str, Any] = Field(default_factory=dict, description="as a problem's: `outcome` on a 409")


class EndResult(BaseModel):
    ended: EndAnswer | None = None
    failure: EndFailure | None = None


class EndBatchAnswer(BaseModel):
    results: list[EndResult] = Field(description="one per end asked, in order")


class TransactionAnswer(BaseModel):
    message_id: str
    state: TransactionState
    topic: str
    producer_group: str
    check_count: int
    stored_at: int
    half_offset: int | None = Field(
        default=None, description="the offset its transaction id carries; null: an id of the old form"
    )


class TransactionList(BaseModel):
    transactions: list[TransactionAnswer]


class CheckedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    physical_offset: int = Field(ge=0)
    defer: bool = Field(default=False, description="within its check immunity: renew without counting a check")
