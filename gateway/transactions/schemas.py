"""Public `/v1` schemas of transactional messages: producer groups, half messages, ending and inspecting them.

A transaction's state, outcome and check count have the same names here as on the
broker's internal API (`/internal/transactions`), so a broker's answer validates
into these models once the gateway adds the transaction id and the broker's name.
"""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from gateway.messages.schemas import MessageContent
from libs.broker_api.transactions import TransactionState
from libs.names import name_schema
from libs.producer_groups import HTTP_URL_SCHEMA, SIGNING_SECRET_SCHEMA

MAX_CHECK_IMMUNITY_SECONDS = 86_400


class ProducerGroupUpdate(BaseModel):
    """What `PUT /v1/producer-groups/{group}` sets."""

    model_config = ConfigDict(extra="forbid")

    checkback_url: str | None = Field(
        default=None,
        json_schema_extra=HTTP_URL_SCHEMA,
        description="where txcheck asks for the outcome of a transaction left open: an http or https URL with a "
        "host, outside the cluster's own networks (else 400); needed to create a group, absent it keeps its value",
    )
    signing_secret: Annotated[str, Field(json_schema_extra=SIGNING_SECRET_SCHEMA)] | None = Field(
        default=None,
        description="whsec_ + base64 of 24 to 64 random bytes (Standard Webhooks); when absent a new group gets a "
        "generated one and an existing group keeps its own",
    )


class ProducerGroup(BaseModel):
    """A producer group: where its open transactions are checked back (the secret is never shown again)."""

    name: str = Field(description="the group's name")
    checkback_url: str = Field(description="where txcheck asks for the outcome of a transaction left open")
    created_at: int = Field(description="ms since the epoch, when the group was registered")


class ProducerGroupRegistration(ProducerGroup):
    """The group as registered or rotated, with the secret its check-backs are signed with when this answer set it."""

    signing_secret: str | None = Field(
        default=None,
        description="verify each check-back's webhook-signature with it (Standard Webhooks); shown once: in the "
        "answer that created the group, set its secret or rotated it",
    )
    secret_overlap_until: int | None = Field(
        default=None, description="ms since the epoch: until then the previous secret signs too (after a rotation)"
    )


class ProducerGroupList(BaseModel):
    producer_groups: list[ProducerGroup] = Field(description="every producer group, by name")


class SendTransaction(MessageContent):
    """A half message: stored, and seen by no consumer until the transaction is committed."""

    producer_group: str = Field(
        json_schema_extra=name_schema(),
        description="a registered producer group (else 404): its checkback_url decides a transaction left open",
    )
    check_immunity_seconds: int | None = Field(
        default=None,
        ge=0,
        le=MAX_CHECK_IMMUNITY_SECONDS,
        description="no check-back before this many seconds after the send (default: txcheck's transaction timeout)",
    )


class SendTransactionResult(BaseModel):
    transaction_id: str = Field(
        description="names the transaction in commit, rollback and lookups; opaque (its form may change)"
    )
    message_id: str = Field(description="the message's id, the same once it is committed")
    topic: str = Field(description="the topic the message goes to when committed")
    broker: str = Field(description="the broker holding the half message")
    stored_at: int = Field(description="ms since the epoch, when the half message was stored")


class TransactionEndedBy(enum.StrEnum):
    PRODUCER = "producer"
    OPERATOR = "operator"


class EndTransaction(BaseModel):
    """Who ends the transaction: its producer (the default), or an operator (e.g. for an abandoned one)."""

    model_config = ConfigDict(extra="forbid")

    by: TransactionEndedBy = Field(default=TransactionEndedBy.PRODUCER, description="kept in the op record and events")


class TransactionOutcome(enum.StrEnum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"


class EndTransactionResult(BaseModel):
    transaction_id: str = Field(description="the transaction, as named")
    message_id: str = Field(description="the message's id")
    outcome: TransactionOutcome = Field(description="how the transaction ended")
    first: bool = Field(description="false when this call repeated an earlier end the same way")
    topic: str = Field(description="the message's topic")
    queue_id: int = Field(description="the queue of the committed message")
    queue_offset: int | None = Field(description="where the committed message is in its queue; null for a rollback")


class TransactionFilter(enum.StrEnum):
    OPEN = "open"
    ABANDONED = "abandoned"


class Transaction(BaseModel):
    """A transaction: open (checked back while left so), abandoned (past the check limit), or ended."""

    transaction_id: str = Field(
        description="names the transaction in commit, rollback and lookups; opaque (its form may change)"
    )
    message_id: str = Field(description="the message's id")
    state: TransactionState = Field(description="ABANDONED: past the check limit, still resolvable by an operator")
    topic: str = Field(description="the topic the message goes to when committed")
    producer_group: str = Field(description="whose checkback_url is asked")
    check_count: int = Field(description="check-backs made so far")
    stored_at: int = Field(description="ms since the epoch, when the half message was first stored")
    broker: str = Field(description="the broker holding the half message")


class TransactionList(BaseModel):
    transactions: list[Transaction] = Field(description="by transaction id, at most `max`")
    unavailable: list[str] = Field(
        default_factory=list, description="brokers that did not answer: their transactions are missing"
    )
    next_after: str | None = Field(
        default=None, description="more may follow: ask again with after=this (null: this is the last page)"
    )
