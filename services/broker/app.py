"""The broker's HTTP API: internal topic admin and identity.

The storage engine (CommitLog, ConsumeQueue, IndexFile) plugs in beside the
TopicTable in `BrokerContext`; its routes join `router` here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, cast

from fastapi import APIRouter, Depends, FastAPI, Request, Response

from libs.http.app import service_app
from libs.http.client import ClientOptions, InternalClient
from libs.names import validate_topic_name
from libs.problem import PROBLEM_RESPONSES
from libs.topic import TopicConfig
from services.broker.metadata import TopicStore, open_engine
from services.broker.registration import NameserverRegistrar
from services.broker.schemas import BrokerIdentity, BrokerTopic, BrokerTopicList, TopicUpdate
from services.broker.settings import BrokerSettings
from services.broker.topics import TopicTable


@dataclass(frozen=True, slots=True)
class BrokerContext:
    settings: BrokerSettings
    topics: TopicTable
    registrar: NameserverRegistrar


def _context(request: Request) -> BrokerContext:
    return cast(BrokerContext, request.state.broker)


def _topic_name(topic: str) -> str:
    return validate_topic_name(topic, allow_system=True)


Context = Annotated[BrokerContext, Depends(_context)]
TopicName = Annotated[str, Depends(_topic_name)]

router = APIRouter(prefix="/internal", tags=["broker"], responses=PROBLEM_RESPONSES)


@router.get("/broker", operation_id="getBrokerIdentity", response_model=BrokerIdentity)
async def get_broker_identity(ctx: Context) -> BrokerIdentity:
    """Who this broker is and which nameservers currently know it."""
    s = ctx.settings
    return BrokerIdentity(
        cluster=s.cluster,
        broker_name=s.broker_name,
        broker_id=s.broker_id,
        address=s.address,
        data_version=ctx.topics.data_version,
        nameservers={ns: ns in ctx.registrar.registered for ns in s.nameservers},
    )


@router.put("/topics/{topic}", operation_id="putBrokerTopic", response_model=BrokerTopic)
async def put_topic(ctx: Context, topic: TopicName, body: TopicUpdate) -> BrokerTopic:
    """Create or update a topic here; answers once the nameservers have been told."""
    config = TopicConfig(topic, body.read_queues, body.write_queues, body.perm, body.message_type)
    created = await ctx.topics.put(config)
    return BrokerTopic.of(config, ctx.settings.broker_name, created)


@router.get("/topics/{topic}", operation_id="getBrokerTopic", response_model=BrokerTopic)
async def get_topic(ctx: Context, topic: TopicName) -> BrokerTopic:
    """One topic's configuration on this broker."""
    return BrokerTopic.of(ctx.topics.get(topic), ctx.settings.broker_name)


@router.get("/topics", operation_id="listBrokerTopics", response_model=BrokerTopicList)
async def list_topics(ctx: Context) -> BrokerTopicList:
    """Every topic on this broker, system topics included."""
    return BrokerTopicList(topics=[BrokerTopic.of(t, ctx.settings.broker_name) for t in ctx.topics.all()])


@router.delete("/topics/{topic}", operation_id="deleteBrokerTopic", status_code=204)
async def delete_topic(ctx: Context, topic: TopicName) -> Response:
    """Delete a topic's configuration here; answers once the nameservers have been told."""
    await ctx.topics.delete(topic)
    return Response(status_code=204)


def create_app(settings: BrokerSettings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, object]]:
        settings.store_dir.mkdir(parents=True, exist_ok=True)
        engine = open_engine(settings.metadata_url)
        topics = TopicTable(TopicStore(engine))
        await topics.load()
        token = settings.internal_token.get_secret_value() if settings.internal_token else None
        async with InternalClient(ClientOptions(token=token, timeout=3.0, retries=1)) as client:
            registrar = NameserverRegistrar(settings, topics, client)
            topics.on_change(registrar.register_all)
            await registrar.register_all()
            periodic = asyncio.create_task(registrar.run(), name="broker-registration")
            try:
                yield {"broker": BrokerContext(settings, topics, registrar)}
            finally:
                periodic.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await periodic
                await registrar.unregister_all()
                engine.dispose()

    async def readiness(request: Request) -> dict[str, str]:
        ctx = _context(request)
        known = [ns for ns in ctx.settings.nameservers if ns in ctx.registrar.registered]
        return {"nameservers": "ok" if known else "registered with none of " + ", ".join(ctx.settings.nameservers)}

    app = service_app(
        "broker", settings, lifespan=lifespan, readiness=readiness, description="Topics and (soon) message storage."
    )
    app.include_router(router)
    return app
