"""BrokerContext: what the broker's handlers use, opened in its lifespan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, cast

from fastapi import Depends, Request

from libs.store.message_store import MessageStore
from services.broker.consume.dead_letters import DeadLetters
from services.broker.consume.pop import PopService
from services.broker.consume.settle import Settlement
from services.broker.lag_history import LagHistory
from services.broker.long_polling import PullWaiters
from services.broker.offsets import ConsumerOffsets
from services.broker.registration import NameserverRegistrar
from services.broker.replication_state import Replication
from services.broker.schedule import ScheduleQueuesAtStart
from services.broker.scheduled_check import ScheduledChecks
from services.broker.settings import BrokerSettings
from services.broker.topics import TopicTable
from services.broker.transactions import Transactions


@dataclass(frozen=True, slots=True)
class BrokerContext:
    settings: BrokerSettings
    topics: TopicTable
    registrar: NameserverRegistrar
    store: MessageStore
    offsets: ConsumerOffsets
    waiters: PullWaiters
    pop: PopService
    settlement: Settlement
    dead_letters: DeadLetters
    transactions: Transactions
    schedule_at_start: ScheduleQueuesAtStart
    replication: Replication
    scheduled: ScheduledChecks
    lag_history: LagHistory


def broker_context(request: Request) -> BrokerContext:
    return cast(BrokerContext, request.state.broker)


async def _broker_context(request: Request) -> BrokerContext:
    # async: FastAPI would run a plain def dependency in a thread pool, per request
    return broker_context(request)


Context = Annotated[BrokerContext, Depends(_broker_context)]
