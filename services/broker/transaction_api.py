"""The broker's internal transaction API: half messages, ending them, state, and check-back renewal."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from libs import jsonutil
from libs.broker_api.transactions import (
    CheckedRequest,
    EndAnswer,
    EndBatch,
    EndBatchAnswer,
    EndedBy,
    EndRequest,
    Outcome,
    TransactionAnswer,
    TransactionList,
    TransactionState,
)
from libs.errors import InvalidRequest, PetrelError
from libs.http.app import json_body, parse_json
from libs.http.hot_routes import Binder
from libs.problem import PROBLEM_RESPONSES
from services.broker.context import Context, broker_context
from services.broker.transactions import Ended, TransactionEnd, TransactionInfo

router = APIRouter(prefix="/internal/transactions", tags=["transactions"], responses=PROBLEM_RESPONSES)


def _transaction(info: TransactionInfo) -> TransactionAnswer:
    return TransactionAnswer(
        message_id=info.message_id,
        state=info.state,
        topic=info.topic,
        producer_group=info.producer_group,
        check_count=info.check_count,
        stored_at=info.stored_at,
        half_offset=info.half_offset,
    )


async def _end(ctx: Context, message_id: str, outcome: Outcome, request: Request) -> EndAnswer:
    raw = await request.body()
    by = parse_json(EndRequest, raw).by if raw.strip() else EndedBy.PRODUCER
    return _answer(await ctx.transactions.end(message_id, outcome, by.value))


def _answer(ended: Ended) -> EndAnswer:
    return EndAnswer(**_ended_fields(ended))


def _ended_fields(ended: Ended) -> dict[str, Any]:
    """An EndAnswer's fields as plain data (a batch's answer is built from them by hand: `_result`)."""
    return {
        "message_id": ended.message_id,
        "outcome": ended.outcome.value,
        "first": ended.first,
        "topic": ended.topic,
        "queue_id": ended.queue_id,
        "queue_offset": ended.queue_offset,
    }


def _result(result: Ended | PetrelError) -> dict[str, Any]:
    """An EndResult as plain data, built by hand on this hot path (as services.broker.messages.answer_put: the
    models cost about as much as storing the end); tests/services/broker/test_transaction_batches.py checks it
    against the model."""
    if isinstance(result, PetrelError):
        failure = {
            "type": result.problem_type(),
            "status": result.status,
            "detail": result.detail,
            "extensions": result.extensions,
        }
        return {"ended": None, "failure": failure}
    return {"ended": _ended_fields(result), "failure": None}


@router.post(":end", operation_id="endTransactions", response_model=EndBatchAnswer, openapi_extra=json_body(EndBatch))
async def end_transactions(ctx: Context, request: Request) -> Response:
    """Commit or roll back many transactions, each as its own commit or rollback would; stored in one append.

    An end that fails (unknown, already ended the other way, not stored) fails alone: its result says why.
    """
    batch = parse_json(EndBatch, await request.body())
    asked = [TransactionEnd(e.message_id, e.outcome, e.by.value, e.half_offset) for e in batch.ends]
    answer = {"results": [_result(r) for r in await ctx.transactions.end_batch(asked)]}
    return Response(jsonutil.dumps(answer), media_type="application/json")  # as EndBatchAnswer, unchecked


def _bind_end(request: Request) -> dict[str, Any]:
    """end_transactions's arguments, as FastAPI would give them (the hot path)."""
    return {"ctx": broker_context(request), "request": request}


HOT_ROUTES: dict[str, Binder] = {"endTransactions": _bind_end}
"""Served without FastAPI's request cycle (libs.http.hot_routes)."""


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
    return _transaction(ctx.transactions.info(message_id))


@router.get("", operation_id="listTransactions", response_model=TransactionList)
async def list_transactions(
    ctx: Context,
    state: Annotated[str, Query(description="open or abandoned (any case)")] = "abandoned",
    max: Annotated[int, Query(ge=1, le=10_000)] = 100,
    after: Annotated[str, Query(description="only transaction ids that sort after this one")] = "",
) -> TransactionList:
    """Open (half messages not ended) or abandoned (past the check limit) transactions, by transaction id."""
    listed = {s.value: s for s in (TransactionState.OPEN, TransactionState.ABANDONED)}
    if state.upper() not in listed:
        raise InvalidRequest(f"state={state!r}: only state=open or state=abandoned can be listed")
    return TransactionList(
        transactions=[_transaction(i) for i in ctx.transactions.listed(listed[state.upper()], max, after)]
    )


@router.post("/{message_id}/checked", operation_id="renewHalfMessage", response_model=TransactionAnswer)
async def checked(ctx: Context, message_id: str, body: CheckedRequest) -> TransactionAnswer:
    """A check-back of this half copy was sent: count it and renew the copy, or abandon it past the limit."""
    return _transaction(await ctx.transactions.checked(message_id, body.physical_offset, defer=body.defer))
