"""GatewayContext: what the gateway's handlers use, opened in its lifespan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, cast

from fastapi import Depends, Request

from gateway.auth.directory import KeyDirectory
from gateway.messages.idempotency import IdempotencyKeys
from gateway.messages.records import RecordBuilder
from gateway.messages.sender import Sender
from gateway.settings import GatewaySettings
from gateway.transactions.producer_groups import ProducerGroups
from gateway.transactions.transaction_ends import TransactionEnds
from libs.auth.keys import KeyStore
from libs.broker_api.client import BrokerClient
from libs.broker_api.nameservers import NameserverClient
from libs.broker_api.receiver import Receiver
from libs.broker_api.route_cache import MasterDirectory, RouteCache
from libs.http.client import InternalClient
from libs.push_api.client import PushClient


@dataclass(frozen=True, slots=True)
class GatewayContext:
    settings: GatewaySettings
    nameservers: NameserverClient
    routes: RouteCache
    brokers: BrokerClient
    records: RecordBuilder
    sender: Sender
    idempotency: IdempotencyKeys
    internal: InternalClient
    receiver: Receiver
    masters: MasterDirectory
    producer_groups: ProducerGroups
    transaction_ends: TransactionEnds
    push: PushClient
    keys: KeyStore
    key_directory: KeyDirectory | None
    """None when auth is off"""
    clock: Callable[[], float]
    """The wall clock (seconds) of time windows and due times; tests pass a FakeClock."""

    def now_ms(self) -> int:
        return int(self.clock() * 1000)


def gateway_context(request: Request) -> GatewayContext:
    return cast(GatewayContext, request.state.gateway)


async def _gateway_context(request: Request) -> GatewayContext:
    # async: FastAPI would run a plain def dependency in a thread pool, per request
    return gateway_context(request)


Context = Annotated[GatewayContext, Depends(_gateway_context)]
