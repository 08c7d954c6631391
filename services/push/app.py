"""The push service: delivers the messages of push subscriptions to their endpoints (create_app)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI

from libs.broker_api.client import BrokerClient
from libs.broker_api.nameservers import NameserverClient
from libs.broker_api.receiver import Receiver
from libs.broker_api.route_cache import MasterDirectory, RouteCache
from libs.egress import Resolver, system_resolver
from libs.http.app import add_routers, register_schemas, service_app
from libs.http.client import ClientOptions, InternalClient
from libs.http.transport import Transport
from services.push import api
from services.push.deliveries import Deliveries
from services.push.leases import GroupLeases
from services.push.metrics import PushCollector
from services.push.settings import PushSettings
from services.push.subscriptions import SubscriptionStore, open_subscription_engine


def create_app(
    settings: PushSettings, *, transport: Transport | None = None, resolve: Resolver = system_resolver
) -> FastAPI:
    """The push service; `transport`: how it calls nameservers and brokers (TCP unless given), `resolve`: how the
    egress guard resolves endpoint hosts (tests give a fixed table)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, object]]:
        engine = open_subscription_engine(settings.metadata_url)
        store = SubscriptionStore(engine)
        guard = settings.egress_guard(resolve)
        token = settings.cluster_token()
        options = ClientOptions(token=token, timeout=settings.broker_timeout_seconds)
        try:
            async with InternalClient(options, transport) as client:
                nameservers = NameserverClient(client, settings.nameservers)
                brokers = BrokerClient(client)
                receiver = Receiver(RouteCache(nameservers, settings.route_refresh_seconds), brokers)
                leases = GroupLeases(brokers, MasterDirectory(nameservers, settings.route_refresh_seconds))
                live = Deliveries(settings, store, receiver, leases, guard, app.state.events)
                await live.start()
                collector = PushCollector(live)
                app.state.metrics.registry.register(collector)
                try:
                    yield {"store": store, "live": live, "egress": guard}
                finally:
                    app.state.metrics.registry.unregister(collector)
                    await live.close()
        finally:
            engine.dispose()

    app = service_app("push", settings, lifespan=lifespan, description="Webhook push subscriptions.")
    app.state.settings = settings
    add_routers(app, api.router)
    register_schemas(app, list(api.REQUEST_BODIES))
    return app
