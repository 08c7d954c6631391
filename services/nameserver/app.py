"""The nameserver's HTTP API: register, heartbeat, unregister, routes, clusters."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, cast

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from prometheus_client import Gauge

from libs.errors import BrokerNotFound, TopicNotFound
from libs.etcd import EtcdClient, EtcdSettings
from libs.http.app import add_routers, service_app
from libs.problem import PROBLEM_RESPONSES
from libs.routing import (
    BrokerRegistration,
    ClusterListing,
    Heartbeat,
    HeartbeatAck,
    RegistrationAck,
    TopicChanges,
    TopicRoute,
    TopicRouteList,
)
from libs.tasks import cancelled
from services.nameserver import controller_routes
from services.nameserver.controller import Controller
from services.nameserver.params import BrokerId, BrokerName
from services.nameserver.route_table import RouteTable
from services.nameserver.settings import NameserverSettings

log = logging.getLogger(__name__)


async def _route_table(request: Request) -> RouteTable:
    return cast(RouteTable, request.state.route_table)


Table = Annotated[RouteTable, Depends(_route_table)]

router = APIRouter(prefix="/internal", tags=["routing"], responses=PROBLEM_RESPONSES)


@router.put("/brokers/{broker_name}/{broker_id}", operation_id="registerBroker", response_model=RegistrationAck)
async def register_broker(
    table: Table, broker_name: BrokerName, broker_id: BrokerId, body: BrokerRegistration, request: Request
) -> RegistrationAck:
    """Register (or re-register) a broker instance with its full topic configuration."""
    table.register(broker_name, broker_id, body)
    settings = cast(NameserverSettings, request.app.state.settings)
    return RegistrationAck(
        broker_name=broker_name,
        broker_id=broker_id,
        data_version=body.data_version,
        expires_after_ms=int(settings.broker_expiry_seconds * 1000),
    )


@router.post(
    "/brokers/{broker_name}/{broker_id}/topics", operation_id="changeBrokerTopics", response_model=HeartbeatAck
)
async def change_broker_topics(
    table: Table, broker_name: BrokerName, broker_id: BrokerId, body: TopicChanges
) -> HeartbeatAck:
    """Apply what changed in a registered broker's topics; `in_sync: false` (nothing applied): register again."""
    return table.change(broker_name, broker_id, body)


@router.post(
    "/brokers/{broker_name}/{broker_id}/heartbeat", operation_id="heartbeatBroker", response_model=HeartbeatAck
)
async def heartbeat_broker(table: Table, broker_name: BrokerName, broker_id: BrokerId, body: Heartbeat) -> HeartbeatAck:
    """Keep a registered broker alive; the answer says whether it must register again."""
    return table.heartbeat(broker_name, broker_id, body.data_version)


@router.delete("/brokers/{broker_name}/{broker_id}", operation_id="unregisterBroker", status_code=204)
async def unregister_broker(table: Table, broker_name: BrokerName, broker_id: BrokerId) -> Response:
    """Forget a broker instance at once (a clean broker shutdown)."""
    if not table.unregister(broker_name, broker_id):
        raise BrokerNotFound(f"broker {broker_name}/{broker_id} is not registered")
    return Response(status_code=204)


@router.get("/routes/{topic}", operation_id="getTopicRoute", response_model=TopicRoute)
async def get_topic_route(table: Table, topic: str) -> TopicRoute:
    """Which brokers hold the topic, with how many queues, and where they are."""
    route = table.route(topic)
    if route is None:
        raise TopicNotFound(
            f"there is no topic {topic!r}: create it with PUT /v1/topics/{topic} "
            "(a topic is also unknown while every broker holding it is down)"
        )
    return route


@router.get("/routes", operation_id="listTopicRoutes", response_model=TopicRouteList)
async def list_topic_routes(table: Table) -> TopicRouteList:
    """The route of every topic any live broker holds."""
    return TopicRouteList(routes=table.routes())


@router.get("/clusters", operation_id="listClusters", response_model=ClusterListing)
async def list_clusters(table: Table) -> ClusterListing:
    """Every live broker instance, by cluster and broker name."""
    return table.clusters()


async def _expiry_scan(table: RouteTable, settings: NameserverSettings, live: Gauge) -> None:
    while True:
        await asyncio.sleep(settings.scan_interval_seconds)
        for instance in table.expire_inactive(settings.broker_expiry_seconds):
            log.warning(
                "dropped broker %s/%s at %s: not heard from for %.0f s",
                instance.broker_name,
                instance.broker_id,
                instance.address,
                settings.broker_expiry_seconds,
            )
        live.set(table.instance_count)


def create_app(
    settings: NameserverSettings, clock: Callable[[], float] = time.monotonic, etcd: EtcdSettings | None = None
) -> FastAPI:
    """`clock` times the brokers' liveness (monotonic: a step of the wall clock drops or keeps no broker); `etcd`:
    where the controller's state is (default: PETREL_ETCD_* from the environment)."""
    etcd = etcd if etcd is not None else EtcdSettings()
    if settings.controller and not etcd.endpoints:
        raise ValueError(
            "PETREL_NAMESERVER_CONTROLLER=true needs PETREL_ETCD_ENDPOINTS: the controller keeps its state and its "
            "leadership in etcd"
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, object]]:
        table = RouteTable(clock)
        live = Gauge("petrel_nameserver_live_brokers", "Live broker instances", registry=app.state.metrics.registry)
        tasks = [asyncio.create_task(_expiry_scan(table, settings, live), name="nameserver-expiry-scan")]
        state: dict[str, object] = {"route_table": table}
        client = EtcdClient(etcd) if etcd.endpoints else None
        if client is not None:
            state["etcd"] = client
        if settings.controller and client is not None:
            controller = Controller(
                client,
                f"{settings.host}:{settings.port}",
                master_timeout=settings.controller_master_timeout_seconds,
                scan_interval=settings.controller_scan_ms / 1000,
                state_dir=settings.data_dir / "nameserver",
                events=app.state.events,
            )
            state["controller"] = controller
            tasks.append(asyncio.create_task(controller.run(), name="controller"))
        try:
            yield state
        finally:
            await cancelled(*tasks)
            if client is not None:
                await client.close()

    app = service_app("nameserver", settings, lifespan=lifespan, description="Broker registry and topic routes.")
    app.state.settings = settings
    add_routers(app, router, controller_routes.router)
    return app
