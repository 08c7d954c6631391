"""`create_app(settings)`: the gateway, Petrel's public HTTP API."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

import redis.asyncio as aioredis
from fastapi import FastAPI, Request
from prometheus_client import Gauge
from starlette.types import Scope

from gateway.auth import routes as keys
from gateway.auth.audit import RateBudget
from gateway.auth.key_check import Authenticator, KeyCheck
from gateway.auth.opened import opened_auth
from gateway.auth.principal import SCOPE_KEY, Principal
from gateway.auth.schemas import KeyRequest
from gateway.auth.spec import document_security
from gateway.cluster import overview as cluster_overview
from gateway.cluster import routes as cluster_routes
from gateway.cluster.long_polls import LongPollGate
from gateway.console import routes as console
from gateway.consume import routes as consume
from gateway.consume.schemas import AckRequest, NackRequest, ReceiveRequest, VisibilityRequest
from gateway.context import GatewayContext, gateway_context
from gateway.edge.problems import document_public_problems
from gateway.groups import routes as groups
from gateway.groups.schemas import GroupUpdate, OffsetResetRequest, RedriveRequest
from gateway.messages import queues as message_queues
from gateway.messages import routes as messages
from gateway.messages.idempotency import IdempotencyKeys
from gateway.messages.records import RecordBuilder
from gateway.messages.schemas import SendBatch, SendMessage
from gateway.messages.sender import Sender
from gateway.push import routes as push
from gateway.settings import PUBLIC_URL_SETTING, GatewaySettings
from gateway.timers import routes as timers
from gateway.topics import routes as topics
from gateway.transactions import routes as transactions
from gateway.transactions.producer_groups import ProducerGroups
from gateway.transactions.schemas import EndTransaction, ProducerGroupUpdate, SendTransaction
from gateway.transactions.transaction_ends import TransactionEnds
from libs.auth.grants import Action
from libs.broker_api.client import BrokerClient
from libs.broker_api.nameservers import NameserverClient
from libs.broker_api.receiver import Receiver
from libs.broker_api.route_cache import MasterDirectory, RouteCache
from libs.errors import PetrelError, Unauthorized
from libs.http.app import add_routers, register_schemas, service_app
from libs.http.client import ClientOptions, InternalClient
from libs.http.guards import Guard
from libs.http.middleware import HostCheck
from libs.http.request_log import RequestLog
from libs.http.site_guards import CrossSiteCheck, LoopbackHostCheck
from libs.http.transport import Transport
from libs.producer_groups import ProducerGroupStore, open_metadata_engine
from libs.push_api.client import PushClient
from libs.push_api.schemas import RotateSecretRequest, SubscriptionRequest
from libs.redis_url import failure

log = logging.getLogger(__name__)

DESCRIPTION = """\
Petrel is a message queue you use over plain HTTP.

Every call but health, readiness and metrics carries an API key, `Authorization: Bearer <key>`
(unless the gateway runs with auth off, on loopback); each operation's `x-petrel-permissions`
says which grants it needs.

Errors are RFC 9457 `application/problem+json` documents whose `type` is stable
per kind of error (`https://petrel.dev/problems/<slug>`).
"""


def create_app(
    settings: GatewaySettings, *, transport: Transport | None = None, clock: Callable[[], float] = time.time
) -> FastAPI:
    # `clock` (seconds) is the wall clock of born timestamps, due times and lookup windows; tests pass a fake one.
    settings.auth_required()  # refuses, before anything opens, to run open where others reach it

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, object]]:
        token = settings.cluster_token()
        options = ClientOptions(token=token, timeout=settings.broker_timeout_seconds)
        redis = aioredis.Redis.from_url(settings.redis_url, socket_connect_timeout=1, socket_timeout=2)
        await _say_if_redis_fails(redis, settings.redis_url)
        metadata = await asyncio.to_thread(open_metadata_engine, settings.metadata_url)
        try:
            # transport: how it calls nameservers and brokers, TCP unless given (tests give an in-process one)
            async with opened_auth(settings, redis) as auth, InternalClient(options, transport) as client:
                nameservers = NameserverClient(client, settings.nameservers)
                routes = RouteCache(nameservers, settings.route_refresh_seconds)
                long_polls = LongPollGate(settings.max_long_polls)
                Gauge(
                    "petrel_gateway_long_polls_waiting",
                    "Receives and pulls waiting for a message in this gateway",
                    registry=app.state.metrics.registry,
                ).set_function(lambda: long_polls.waiting)
                brokers = BrokerClient(client, long_polls)
                masters = MasterDirectory(nameservers, settings.route_refresh_seconds)
                context = GatewayContext(
                    settings=settings,
                    nameservers=nameservers,
                    routes=routes,
                    brokers=brokers,
                    records=RecordBuilder(
                        born_host=f"{settings.host}:{settings.port}",
                        delay_levels=len(settings.delay_levels),
                        max_delay_ms=int(settings.max_delay_days * 86_400_000),
                        clock=clock,
                        max_message_bytes=settings.max_message_bytes,
                    ),
                    sender=Sender(routes, brokers, masters),
                    internal=client,
                    idempotency=IdempotencyKeys(redis, settings.idempotency_lease_ms),
                    receiver=Receiver(routes, brokers),
                    masters=masters,
                    producer_groups=ProducerGroups(ProducerGroupStore(metadata), settings.egress_guard()),
                    transaction_ends=TransactionEnds(brokers),
                    push=PushClient(client, settings.push_address),
                    keys=auth.keys,
                    key_directory=auth.directory,
                    clock=clock,
                )
                yield {
                    "gateway": context,
                    "auth": auth,
                    "refusal_budget": RateBudget(settings.audit_refusals_per_second),
                }
        finally:
            metadata.dispose()
            await redis.aclose()

    async def readiness(request: Request) -> dict[str, str]:
        ctx = gateway_context(request)
        try:
            listing = await ctx.nameservers.clusters()
        except PetrelError as exc:
            return {"nameservers": exc.detail}
        brokers = sum(len(c.brokers) for c in listing.clusters)
        return {"nameservers": "ok", "brokers": "ok" if brokers else "no broker is registered"}

    async def readiness_detail(request: Request) -> bool:
        """What is wrong is told to a key with admin on the cluster, and to anyone while auth is off."""
        auth: Authenticator = request.state.auth
        try:
            principal = await auth.principal(request.headers.get("authorization"))
        except Unauthorized:
            return False
        return principal.may((Action.ADMIN,), "cluster")

    app = service_app(
        "gateway",
        settings,
        lifespan=lifespan,
        readiness=readiness,
        public=True,
        max_body_bytes=settings.max_body_bytes,
        description=DESCRIPTION,
        guards=[*edge_guards(settings), KeyCheck()],
        hot_routes=messages.HOT_ROUTES | consume.HOT_ROUTES | transactions.HOT_ROUTES,
        worker=settings.worker,
        readiness_detail=readiness_detail,
        readiness_clock=clock,
        cdn_docs=False,
        request_log=RequestLog(caller_key_id) if settings.request_log else None,
    )
    # Starlette tries routes in order, a few microseconds each: the hot paths (send, consume, transactions) first.
    add_routers(
        app,
        messages.router,
        consume.router,
        transactions.router,
        topics.router,
        timers.router,
        cluster_routes.router,
        cluster_overview.router,
        groups.router,
        push.router,
        message_queues.router,
        push.every_group,
        keys.router,
        console.router,
    )
    app.router.routes.append(console.static_files())
    register_schemas(
        app,
        [
            SendMessage,
            SendBatch,
            GroupUpdate,
            ReceiveRequest,
            AckRequest,
            NackRequest,
            VisibilityRequest,
            OffsetResetRequest,
            RedriveRequest,
            ProducerGroupUpdate,
            SendTransaction,
            EndTransaction,
            SubscriptionRequest,
            RotateSecretRequest,
            KeyRequest,
        ],
    )
    document_public_problems(app)
    document_security(app)
    return app


def caller_key_id(scope: Scope) -> str | None:
    """The id of the key a request was let in with (None with auth off, or before the key check answered)."""
    principal = scope.get(SCOPE_KEY)
    return principal.key_id if isinstance(principal, Principal) else None


def edge_guards(settings: GatewaySettings) -> list[Guard]:
    """The Host and cross-site checks, before the key check (docs/security.md, "Browsers and proxies").

    Auth off on loopback: loopback names only, and no proxy in between. Auth off elsewhere (insecure_no_auth): an
    internal service's rule, IP addresses, localhost and the names the gateway answers to. Auth on: those too when
    names are given; with none, any Host (the key is the credential, and a browser never sends it by itself).
    """
    names = settings.answered_names()
    host: list[Guard] = []
    if not settings.auth_required() and settings.reached_by_others() is None:
        host = [LoopbackHostCheck(PUBLIC_URL_SETTING)]
    elif names or not settings.auth_required():
        host = [HostCheck(names)]
    return [*host, CrossSiteCheck(names)]


async def _say_if_redis_fails(redis: aioredis.Redis, url: str) -> None:
    """A log line at start when Redis refuses the URL's password or does not answer (the gateway starts anyway:
    only sends with an Idempotency-Key need it, and they answer 503 meanwhile)."""
    try:
        await redis.ping()
    except (aioredis.RedisError, OSError) as exc:
        log.error("%s (sends with an Idempotency-Key answer 503 meanwhile)", failure(url, exc))
