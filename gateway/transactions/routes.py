"""`/v1` transactional messages: producer groups, half messages, commit and rollback, abandoned transactions.

A half message goes to one broker (the queue selector's choice, as a send), which
keeps it unseen until it is ended. Its transaction id names that broker and the
message, and where the half is in the broker's CommitLog (libs.broker_api.transaction_ids),
so commit, rollback and lookups go straight to that broker, and an end reads one
record there. Producer groups live in the shared metadata database, where txcheck
finds a group's checkback_url.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any, Final

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError

from gateway.auth.needs import ADMIN, PUB
from gateway.auth.principal import authorize, principal_of, reveal
from gateway.auth.route import AuthorizedRoute
from gateway.cluster.writes import create_only_of, ensure_topic, on_each
from gateway.context import Context, GatewayContext, gateway_context
from gateway.edge.outgoing import outgoing
from gateway.edge.params import ProducerGroupName, TransactionId, UserTopic
from gateway.transactions.schemas import (
    EndTransaction,
    EndTransactionResult,
    ProducerGroup,
    ProducerGroupList,
    ProducerGroupRegistration,
    ProducerGroupUpdate,
    SendTransaction,
    SendTransactionResult,
    Transaction,
    TransactionFilter,
    TransactionList,
    TransactionOutcome,
)
from libs import jsonutil, producer_groups
from libs.broker_api import transaction_ids
from libs.broker_api.fanout import failure_of_all
from libs.broker_api.transaction_ids import ORIGIN_OFFSET, TransactionAddress
from libs.broker_api.transactions import TransactionState
from libs.broker_api.wire import CHECK_IMMUNITY, FIRST_STORED
from libs.errors import (
    AlreadyExists,
    BrokerUnavailable,
    FlushTimeout,
    InvalidMessage,
    InvalidRequest,
    InvalidTopicName,
    MalformedBody,
    NotFound,
    ProducerGroupNotFound,
    PutQueueFull,
    ReservedTopicName,
    ServiceUnavailable,
    StoreFull,
    StoreReadOnly,
    TopicNotFound,
    TransactionAlreadyEnded,
    TransactionNotFound,
    ValidationFailed,
)
from libs.http.app import json_body, parse_json
from libs.http.hot_routes import Binder
from libs.message import Prop
from libs.names import validate_group_name, validate_topic_name
from libs.problem import problem_responses
from libs.push_api.schemas import RotateSecretRequest

router = APIRouter(prefix="/v1", tags=["transactions"], route_class=AuthorizedRoute)

DELAY_FIELDS: Final = frozenset({"delay_level", "delay_ms", "deliver_at"})
HALF_PROPERTIES: Final = frozenset({CHECK_IMMUNITY, FIRST_STORED, ORIGIN_OFFSET})
"""Properties the broker and txcheck read on a half message, beyond libs.message.Prop: never the producer's."""
END_RESULT_FIELDS: Final = tuple(f for f in EndTransactionResult.model_fields if f != "transaction_id")
JSON = "application/json"
END_PROBLEMS = problem_responses(
    MalformedBody, TransactionNotFound, TransactionAlreadyEnded, ValidationFailed, StoreFull, StoreReadOnly
)


@router.put(
    "/producer-groups/{group}",
    operation_id="putProducerGroup",
    response_model=ProducerGroupRegistration,
    responses={
        201: {"model": ProducerGroupRegistration, "description": "Created"},
        **problem_responses(InvalidRequest, MalformedBody, ValidationFailed, AlreadyExists),
    },
    openapi_extra=json_body(ProducerGroupUpdate),
)
async def put_producer_group(
    ctx: Context,
    group: ProducerGroupName,
    request: Request,
    response: Response,
    if_none_match: Annotated[str | None, Header(description="*: create only (412 when the group exists)")] = None,
) -> ProducerGroupRegistration:
    """Register the group's checkback_url and signing secret (201), or change only the fields named (200).

    A new group needs a checkback_url. The secret is shown once, in the answer that set it: without one given,
    a new group gets a generated one and an existing group keeps its own (not shown again; `:rotate-secret` makes
    a new one). `If-None-Match: *` makes it create-only (412 already-exists).
    """
    create_only = create_only_of(if_none_match)
    spec = parse_json(ProducerGroupUpdate, await request.body())
    stored, created = await ctx.producer_groups.put(
        group, spec.checkback_url, spec.signing_secret, create_only=create_only
    )
    response.status_code = 201 if created else 200
    return _registration(stored, ctx.now_ms(), show_secret=created or spec.signing_secret is not None)


@router.post(
    "/producer-groups/{group}:rotate-secret",
    operation_id="rotateProducerGroupSecret",
    response_model=ProducerGroupRegistration,
    openapi_extra=json_body(RotateSecretRequest, required=False),
    responses=problem_responses(InvalidRequest, MalformedBody, ProducerGroupNotFound, ValidationFailed),
)
async def rotate_producer_group_secret(
    ctx: Context, group: ProducerGroupName, request: Request
) -> ProducerGroupRegistration:
    """A new signing secret, shown in this answer; both sign until `secret_overlap_until` (no body: one day)."""
    raw = await request.body()
    rotation = parse_json(RotateSecretRequest, raw) if raw.strip() else RotateSecretRequest()
    now = ctx.now_ms()
    rotated = await ctx.producer_groups.rotate_secret(group, rotation.overlap_seconds, now)
    return _registration(rotated, now, show_secret=True)


@router.get("/producer-groups", operation_id="listProducerGroups", response_model=ProducerGroupList)
async def list_producer_groups(ctx: Context, request: Request) -> ProducerGroupList:
    """Every producer group the key may administer, by name (without secrets)."""
    principal = principal_of(request)
    listed = [g for g in await ctx.producer_groups.list() if principal.may((ADMIN,), "group", g.name)]
    return ProducerGroupList(producer_groups=[ProducerGroup(**_producer_group_fields(g)) for g in listed])


@router.get(
    "/producer-groups/{group}",
    operation_id="getProducerGroup",
    response_model=ProducerGroup,
    responses=problem_responses(InvalidRequest, ProducerGroupNotFound),
)
async def get_producer_group(ctx: Context, group: ProducerGroupName) -> ProducerGroup:
    """The group's checkback_url (its secret is not shown again)."""
    return ProducerGroup(**_producer_group_fields(await ctx.producer_groups.get(group)))


@router.post(
    "/topics/{topic}/transactions",
    operation_id="sendTransaction",
    response_model=SendTransactionResult,
    status_code=201,
    openapi_extra=json_body(SendTransaction),
    responses=problem_responses(
        InvalidTopicName,
        ReservedTopicName,
        InvalidRequest,
        MalformedBody,
        InvalidMessage,
        TopicNotFound,
        ProducerGroupNotFound,
        ValidationFailed,
        BrokerUnavailable,
        FlushTimeout,
        PutQueueFull,
        StoreReadOnly,
        StoreFull,
    ),
)
async def send_transaction(ctx: Context, topic: UserTopic, request: Request) -> Response:
    """Send a half message: stored, seen by no consumer until committed; left open, its producer is asked."""
    spec = _parse_transaction(await request.body())
    reserved = sorted(spec.properties.keys() & HALF_PROPERTIES)
    if reserved:
        raise InvalidMessage(f"property name(s) {', '.join(reserved)} are reserved for Petrel")
    authorize(request, (PUB,), "group", validate_group_name(spec.producer_group))
    await ctx.producer_groups.require(spec.producer_group)
    system = {Prop.PRODUCER_GROUP: spec.producer_group, Prop.TRANSACTION_PREPARED: "true"}
    if spec.check_immunity_seconds is not None:
        system[CHECK_IMMUNITY] = str(spec.check_immunity_seconds)
    prepared = ctx.records.prepare(topic, outgoing(spec), system)
    await ensure_topic(ctx, topic)
    # A flush timeout says which transaction it is (the half is stored), so that it can be ended: see Sender.
    sent = await ctx.sender.send_half(topic, prepared)
    named = transaction_ids.transaction_id(sent.broker, sent.message_id, sent.half_offset)
    request.state.events.emit(
        "transaction_half",
        message_id=sent.message_id,
        topic=topic,
        transaction_id=named,
        producer_group=spec.producer_group,
    )
    answer = {
        "transaction_id": named,
        "message_id": sent.message_id,
        "topic": sent.topic,
        "broker": sent.broker,
        "stored_at": sent.stored_at,
    }
    return Response(jsonutil.dumps(answer), status_code=201, media_type=JSON)  # as SendTransactionResult, unchecked


@router.post(
    "/transactions/{transaction_id}/commit",
    operation_id="commitTransaction",
    response_model=EndTransactionResult,
    openapi_extra=json_body(EndTransaction, required=False),
    responses=END_PROBLEMS,
)
async def commit(ctx: Context, transaction_id: TransactionId, request: Request) -> Response:
    """Commit: the message goes to its topic, once. Repeating it is harmless; after a rollback it is a 409."""
    return await _end(ctx, transaction_id, TransactionOutcome.COMMIT, request)


@router.post(
    "/transactions/{transaction_id}/rollback",
    operation_id="rollbackTransaction",
    response_model=EndTransactionResult,
    openapi_extra=json_body(EndTransaction, required=False),
    responses=END_PROBLEMS,
)
async def rollback(ctx: Context, transaction_id: TransactionId, request: Request) -> Response:
    """Roll back: the message is never delivered. Repeating it is harmless; after a commit it is a 409."""
    return await _end(ctx, transaction_id, TransactionOutcome.ROLLBACK, request)


@router.get(
    "/transactions",
    operation_id="listTransactions",
    response_model=TransactionList,
    responses=problem_responses(ValidationFailed),
)
async def list_transactions(
    ctx: Context,
    request: Request,
    state: Annotated[
        TransactionFilter,
        Query(description="open: not ended, checked back while left so; abandoned: past the check limit"),
    ],
    max: Annotated[int, Query(ge=1, le=1000, description="at most this many (a page)")] = 100,
    after: Annotated[str, Query(description="the page after this transaction id (a page's next_after)")] = "",
) -> TransactionList:
    """Open or abandoned transactions from every broker, by transaction id, a page at a time.

    Abandoned ones wait for an operator's commit or rollback; open ones for their producer's
    end or a check-back.
    """
    targets = await ctx.nameservers.masters()
    if not targets:
        raise ServiceUnavailable("no broker is registered with the nameservers")
    wanted = TransactionState[state.name].value  # the broker spells states as its answers do: ABANDONED
    principal = principal_of(request)
    listed: list[Transaction] = []
    failed: list[tuple[str, BaseException]] = []
    cursor = after
    # A page of `max` from each broker, filtered by what the key may see: ask again past what was hidden.
    while True:
        answers, failed = await on_each(targets, partial(_list_page, ctx, wanted, max, cursor))
        if not answers:
            raise failure_of_all(e for _, e in failed)
        page = sorted(
            (_transaction(t, broker) for broker, found in answers for t in found), key=lambda t: t.transaction_id
        )[:max]
        listed += [t for t in page if principal.may((PUB, ADMIN), "topic", t.topic)]
        if len(page) < max or len(listed) >= max:
            break
        cursor = page[-1].transaction_id
    listed = listed[:max]
    more = len(listed) == max
    return TransactionList(
        transactions=listed,
        unavailable=[name for name, exc in failed if not isinstance(exc, NotFound)],
        next_after=listed[-1].transaction_id if more else None,
    )


@router.get(
    "/transactions/{transaction_id}",
    operation_id="getTransaction",
    response_model=Transaction,
    responses=problem_responses(TransactionNotFound),
)
async def get_transaction(ctx: Context, transaction_id: TransactionId, request: Request) -> Transaction:
    """The transaction's state: OPEN, ABANDONED (past the check limit), COMMITTED or ROLLED_BACK."""
    named, address = await _locate(ctx, transaction_id)
    return _transaction(await _half(ctx, request, transaction_id, named, address), named.broker)


def _bind_send(request: Request) -> dict[str, Any]:
    """send_transaction's arguments, as FastAPI's dependencies would give them (the hot path)."""
    topic = validate_topic_name(request.path_params["topic"])
    return {"ctx": gateway_context(request), "topic": topic, "request": request}


def _bind_end(request: Request) -> dict[str, Any]:
    """commit's and rollback's arguments (a transaction id is checked by looking it up: 404 when unknown)."""
    return {
        "ctx": gateway_context(request),
        "transaction_id": request.path_params["transaction_id"],
        "request": request,
    }


HOT_ROUTES: dict[str, Binder] = {
    "sendTransaction": _bind_send,
    "commitTransaction": _bind_end,
    "rollbackTransaction": _bind_end,
}
"""Served without FastAPI's request cycle (libs.http.hot_routes)."""


async def _end(ctx: GatewayContext, transaction_id: str, outcome: TransactionOutcome, request: Request) -> Response:
    raw = await request.body()
    spec = parse_json(EndTransaction, raw) if raw.strip() else EndTransaction()
    named, address = await _locate(ctx, transaction_id)
    if not principal_of(request).may_all((PUB, ADMIN), "topic"):  # a key limited to some topics: which is this one's?
        await _half(ctx, request, transaction_id, named, address)
    ended = await ctx.transaction_ends.end(named, address, outcome.value, spec.by.value)
    answer = {"transaction_id": transaction_id} | {name: ended[name] for name in END_RESULT_FIELDS}
    return Response(jsonutil.dumps(answer), media_type=JSON)  # as EndTransactionResult: the broker's EndAnswer


async def _locate(ctx: GatewayContext, transaction_id: str) -> tuple[TransactionAddress, str]:
    """The parts of a transaction id, and its broker's master's address; TransactionNotFound when there is none."""
    named = transaction_ids.parse_transaction_id(transaction_id)
    if named is None:
        raise TransactionNotFound(
            f"{transaction_id!r} is not a Petrel transaction id (use one as sending a half message answered it)"
        )
    address = (await ctx.masters.lookup([named.broker])).get(named.broker)
    if address is None:
        raise TransactionNotFound(f"no transaction {transaction_id}: broker {named.broker!r} is not registered")
    return named, address


async def _half(
    ctx: GatewayContext, request: Request, transaction_id: str, named: TransactionAddress, address: str
) -> dict[str, Any]:
    """The broker's view of the transaction, if the key may use its topic; else the 404 of one that is not there
    (the same answer, so that an id tells nothing of a topic the key may not see)."""
    broker = named.broker
    missing = TransactionNotFound(f"no transaction {transaction_id} on broker {broker!r} (or it is past retention)")
    try:
        half = await ctx.brokers.get_transaction(broker, address, named.message_id)
    except TransactionNotFound:
        raise missing from None
    reveal(request, (PUB, ADMIN), "topic", str(half["topic"]), missing)
    return half


def _parse_transaction(raw: bytes) -> SendTransaction:
    """The request, or a 400 that says a transactional message cannot be delayed."""
    try:
        return parse_json(SendTransaction, raw)
    except RequestValidationError as exc:
        delays = sorted(
            {str(e["loc"][1]) for e in exc.errors() if e["type"] == "extra_forbidden" and e["loc"][1] in DELAY_FIELDS}
        )
        if delays:
            raise InvalidMessage(
                f"a transactional message cannot be delayed ({', '.join(delays)}): it is delivered when committed"
            ) from None
        raise


def _producer_group_fields(group: producer_groups.ProducerGroup) -> dict[str, Any]:
    return {"name": group.name, "checkback_url": group.checkback_url, "created_at": group.created_at}


def _registration(group: producer_groups.ProducerGroup, now_ms: int, *, show_secret: bool) -> ProducerGroupRegistration:
    overlapping = len(group.signing_secrets(now_ms)) > 1
    return ProducerGroupRegistration(
        **_producer_group_fields(group),
        signing_secret=group.signing_secret if show_secret else None,
        secret_overlap_until=group.previous_secret_until if overlapping else None,
    )


async def _list_page(
    ctx: GatewayContext, state: str, max: int, after: str, broker: str, address: str
) -> list[dict[str, Any]]:
    return await ctx.brokers.list_transactions(broker, address, state, max, after)


def _transaction(answer: dict[str, Any], broker: str) -> Transaction:
    named = transaction_ids.transaction_id(broker, answer["message_id"], answer.get("half_offset"))
    fields = {name: value for name, value in answer.items() if name != "half_offset"}
    return Transaction.model_validate({**fields, "transaction_id": named, "broker": broker})
