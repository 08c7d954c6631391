"""The broker's internal transaction API: half messages, ending them, state, and check-back renewal."""

from __future__ import annotations

import enum
from typing import Annotated, Any, Final

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from libs.errors import InvalidRequest, PetrelError
from libs.http.app import json_body, parse_json
from libs.problem import PROBLEM_RESPONSES
from services.broker.context import Context
from services.broker.transactions import Ended, Outcome, TransactionEnd, TransactionInfo, TransactionState

router = APIRouter(prefix="/internal/transactions", tags=["transactions"], responses=PROBLEM_RESPONSES)

MAX_ENDS: Final = 1000


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


class EndEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message_id: str
    outcome: Outcome
    by: EndedBy = EndedBy.PRODUCER


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

    @classmethod
    def of(cls, info: TransactionInfo) -> TransactionAnswer:
        return cls(
            message_id=info.message_id,
            state=info.state,
            topic=info.topic,
            producer_group=info.producer_group,
            check_count=info.check_count,
            stored_at=info.stored_at,
        )


class TransactionList(BaseModel):
    transactions: list[TransactionAnswer]


class CheckedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    physical_offset: int = Field(ge=0)
    defer: bool = Field(default=False, description="within its check immunity: renew without counting a check")


async def _end(ctx: Context, message_id: str, outcome: Outcome, request: Request) -> EndAnswer:
    raw = await request.body()
    by = parse_json(EndRequest, raw).by if raw.strip() else EndedBy.PRODUCER
    return _answer(await ctx.transactions.end(message_id, outcome, by.value))


def _answer(ended: Ended) -> EndAnswer:
    return EndAnswer(
        message_id=ended.message_id,
        outcome=ended.outcome,
        first=ended.first,
        topic=ended.topic,
        queue_id=ended.queue_id,
        queue_offset=ended.queue_offset,
    )


def _result(result: Ended | PetrelError) -> EndResult:
    if isinstance(result, PetrelError):
        failure = EndFailure(
            type=result.problem_type(), status=result.status, detail=result.detail, extensions=result.extensions
        )
        return EndResult(failure=failure)
    return EndResult(ended=_answer(result))


@router.post(":end", operation_id="endTransactions", response_model=EndBatchAnswer, openapi_extra=json_body(EndBatch))
async def end_transactions(ctx: Context, request: Request) -> EndBatchAnswer:
    """Commit or roll back many transactions, each as its own commit or rollback would; stored in one append.

    An end that fails (unknown, already ended the other way, not stored) fails alone: its result says why.
    """
    batch = parse_json(EndBatch, await request.body())
    asked = [TransactionEnd(e.message_id, e.outcome, e.by.value) for e in batch.ends]
    return EndBatchAnswer(results=[_result(r) for r in await ctx.transactions.end_batch(asked)])


END_BODY = json_body(EndRequest, required=False)


@router.post("/{message_id}/commit", operation_id="commitTransaction", response_model=EndAnswer, openapi_extra=END_BODY)
async def commit(ctx: Context, message_id: str, request: Request) -> EndAnswer:
    """Commit: the message goes to its real topic, once. Repeating it is harmless; after a rollback, 409."""
    return await _end(ctx, message_id, Outcome.COMMIT, request)


@router.post(
    "/{message_id}/rollback", operation_id="rollbackTransaction", response_model=EndAnswer, openapi_extra=END_BODY
)
async def rollback(ctx: Context, message_id: str, request: Request) -> EndAnswer:
    """Roll back: the message is never delivered. Repeating it is harmless; after a commit, 409."""
    return await _end(ctx, message_id, Outcome.ROLLBACK, request)


@router.get("/{message_id}", operation_id="getTransaction", response_model=TransactionAnswer)
async def get_transaction(ctx: Context, message_id: str) -> TransactionAnswer:
    """A transaction's state: OPEN, ABANDONED (past the check limit), COMMITTED or ROLLED_BACK."""
    return TransactionAnswer.of(ctx.transactions.info(message_id))


@router.get("", operation_id="listTransactions", response_model=TransactionList)
async def list_transactions(
    ctx: Context,
    state: Annotated[str, Query(description="abandoned (any case): the only state listed")] = "abandoned",
    max: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> TransactionList:
    """Abandoned transactions (past the check limit, still resolvable by commit or rollback)."""
    if state.upper() != TransactionState.ABANDONED:
        raise InvalidRequest(f"state={state!r}: only state=abandoned can be listed")
    return TransactionList(transactions=[TransactionAnswer.of(i) for i in ctx.transactions.abandoned(max)])


@router.post("/{message_id}/checked", operation_id="renewHalfMessage", response_model=TransactionAnswer)
async def checked(ctx: Context, message_id: str, body: CheckedRequest) -> TransactionAnswer:
    """A check-back of this half copy was sent: count it and renew the copy, or abandon it past the limit."""
    return TransactionAnswer.of(await ctx.transactions.checked(message_id, body.physical_offset, defer=body.defer))
