"""The broker's HTTP API: internal topic admin and identity.

The data API (put, pull, queries, offsets) is in `services.broker.messages`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from prometheus_client import CollectorRegistry, Gauge
from sqlalchemy import Engine

from libs.broker_api.consume import HandleList, NackBody, ReceiveBody
from libs.broker_api.replication import BrokerRole
from libs.broker_api.schemas import BrokerIdentity, BrokerTopic, BrokerTopicList, TopicUpdate
from libs.broker_api.transactions import EndBatch, EndRequest
from libs.etcd import EtcdSettings
from libs.events.writer import EventWriter
from libs.http.app import add_routers, register_schemas, service_app
from libs.http.client import ClientOptions, InternalClient
from libs.http.stopping import on_stopping, request_restart
from libs.http.transport import Transport
from libs.names import validate_topic_name
from libs.problem import PROBLEM_RESPONSES
from libs.store.message_store import MessageStore
from libs.tasks import cancelled
from services.broker import messages, overview, timers, transaction_api
from services.broker import replication as replication_routes
from services.broker.consume import api as consume_api
from services.broker.consume.dead_letters import DeadLetters
from services.broker.consume.groups import GroupStore, GroupTable
from services.broker.consume.pop import PopService
from services.broker.consume.redriven import RedrivenMarks
from services.broker.consume.settle import Settlement
from services.broker.consumer_mirror import ConsumerMirror, receipt_key
from services.broker.context import BrokerContext, Context, broker_context
from services.broker.controller_link import RunHandover
from services.broker.epoch_sync import RoleOfRun, decide_role
from services.broker.in_sync import InSyncReplicas
from services.broker.lag_history import LagHistory
from services.broker.long_polling import PullWaiters
from services.broker.memory import watch_memory
from services.broker.metadata import AttemptStore, OffsetStore, RedrivenStore, TopicStore, open_engine
from services.broker.offsets import ConsumerOffsets
from services.broker.registration import NameserverRegistrar
from services.broker.replica_follower import ReplicaFollower
from services.broker.replication_state import FollowerState, Replication, WriteFence, watch_replication
from services.broker.schedule import ScheduleQueuesAtStart, guard_scheduled
from services.broker.scheduled_check import ScheduledChecks
from services.broker.settings import BrokerSettings
from services.broker.topics import TopicTable, ensure_system_topics
from services.broker.transactions import Transactions


async def _topic_name(topic: str) -> str:
    return validate_topic_name(topic, allow_system=True)


TopicName = Annotated[str, Depends(_topic_name)]

log = logging.getLogger(__name__)

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
    """Create a topic here, or change only the fields named; answers once the nameservers have been told.

    Fewer queues are refused (409) while a queue to be removed holds messages; `create_only`: 412 when it exists.
    """

    def held(queue_id: int) -> int:
        low, high = ctx.store.queue_offsets(topic, queue_id)
        return high - low

    config, created = await ctx.topics.change(
        topic, lambda old: body.merged(topic, old), held=held, create_only=body.create_only
    )
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
    await ctx.store.delete_topic(topic)
    return Response(status_code=204)


def create_app(
    settings: BrokerSettings,
    *,
    transport: Transport | None = None,
    clock: Callable[[], float] = time.time,
    etcd: EtcdSettings | None = None,
    handover: RunHandover | None = None,
) -> FastAPI:
    # `clock` (seconds) times the leases and transactions; tests pass a fake one. `etcd`: where a controlled broker
    # reports (default: PETREL_ETCD_* from the environment); `handover`: the run of the app before this one in the
    # same process (services.broker.controller_link).

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, object]]:
        engine, topics, offsets, groups, redriven = await _open_metadata(settings)
        token = settings.cluster_token()
        store = await _open_store(settings, app.state.metrics.registry)
        run = await decide_role(settings, store, token, app.state.events, _etcd_of(settings, etcd), handover)
        await offsets.clamp(lambda topic, queue_id: store.queue_offsets(topic, queue_id)[1])
        schedule_at_start, waiters = _start_store(app, store, topics)
        offsets.start()
        retention = asyncio.create_task(_retention(store, settings.retention_scan_seconds), name="store-retention")
        pop, settlement = _consumers(settings, topics, groups, store, offsets, waiters, app.state.events, clock)
        transactions = await _transactions(settings, store, topics, app.state.events, clock)
        watch_memory(app.state.metrics.registry, pop, transactions)
        lag_history, background = _background(settings, pop, settlement, clock, app.state.metrics.registry)
        replication, follower = await _replication(
            settings,
            run,
            store,
            topics,
            token,
            app.state.events,
            await _consumer_mirror(settings, engine, offsets, pop, redriven),
        )
        follower.extend(_take_role(app, fence, run, replication))
        heard = on_stopping(app, replication.close)
        try:
            # transport: how it calls the nameservers, TCP unless given (tests give an in-process one)
            async with InternalClient(
                ClientOptions(token=token, timeout=settings.nameserver_timeout_seconds, retries=1), transport
            ) as client:
                registrar = NameserverRegistrar(settings, topics, client)
                registrar.claim(run.role is not BrokerRole.SLAVE, run.epochs.last_epoch if run.link else 0)
                topics.on_change(registrar.topic_changed)
                await registrar.register_all()
                periodic = asyncio.create_task(registrar.run(), name="broker-registration")
                try:
                    yield {
                        "broker": BrokerContext(
                            settings,
                            topics,
                            registrar,
                            store,
                            offsets,
                            waiters,
                            pop,
                            settlement,
                            DeadLetters(pop, redriven),
                            transactions,
                            schedule_at_start,
                            replication,
                            ScheduledChecks(store, app.state.events, app.state.metrics.registry),
                            lag_history,
                        )
                    }
                finally:
                    await cancelled(periodic)
                    await registrar.unregister_all()
        finally:
            heard()
            await cancelled(*background, retention, *follower)
            await offsets.stop()
            await store.close()
            engine.dispose()
            if run.link is not None:
                await run.link.close()

    async def readiness(request: Request) -> dict[str, str]:
        ctx = broker_context(request)
        known = [ns for ns in ctx.settings.nameservers if ns in ctx.registrar.registered]
        return {"nameservers": "ok" if known else "registered with none of " + ", ".join(ctx.settings.nameservers)}

    fence = WriteFence(settings.broker_name)
    app = service_app(
        "broker",
        settings,
        lifespan=lifespan,
        readiness=readiness,
        guards=[fence],
        description="Topics, message storage and pulls.",
        hot_routes=messages.HOT_ROUTES | consume_api.HOT_ROUTES | transaction_api.HOT_ROUTES,
    )
    routers = (router, messages.router, timers.router, consume_api.router, transaction_api.router)
    add_routers(app, *routers, replication_routes.router, overview.router)
    register_schemas(app, [ReceiveBody, HandleList, NackBody, EndRequest, EndBatch])
    return app


def _etcd_of(settings: BrokerSettings, etcd: EtcdSettings | None) -> EtcdSettings:
    etcd = etcd if etcd is not None else EtcdSettings()
    if settings.controlled and not etcd.endpoints:
        raise ValueError("PETREL_BROKER_CONTROLLED=true needs PETREL_ETCD_ENDPOINTS: the controller's state is in etcd")
    return etcd


def _take_role(app: FastAPI, fence: WriteFence, run: RoleOfRun, replication: Replication) -> list[asyncio.Task[None]]:
    """This run's role, taken: its metrics; a slave refuses writes, a master under a controller refuses them once
    its etcd lease may have expired, and its in-sync set starts as the controller's state has it (a restarted master
    does not acknowledge alone while the state says slaves are in sync); under a controller, the task that reports
    in etcd and watches the state (and restarts the app on a new role)."""
    watch_replication(app.state.metrics.registry, replication)
    if run.role is BrokerRole.SLAVE:
        fence.slave(run.master_address)
    link = run.link
    if link is None:
        return []
    in_sync = replication.in_sync
    if link.is_master:
        fence.lease_held = link.holds_lease
        replication.fence(link.holds_lease)
        replication.controller = link
        if in_sync is not None:
            in_sync.confirm = link.change_in_sync
            if link.run_as is not None:
                in_sync.start_with([i for i in link.run_as.in_sync if i != link.broker_id])

    def restart(why: str) -> None:
        app.state.controller_handover = link.hand_over()
        request_restart(app, why)

    return [asyncio.create_task(link.run(in_sync, restart), name="controller-link")]


async def _replication(
    settings: BrokerSettings,
    run: RoleOfRun,
    store: MessageStore,
    topics: TopicTable,
    token: str | None,
    events: EventWriter,
    consumers: ConsumerMirror,
) -> tuple[Replication, list[asyncio.Task[None]]]:
    """This broker's part in replication; a slave's follower of its master, started (none for a master)."""
    in_sync = InSyncReplicas(
        settings.broker_name,
        settings.sync_replication_timeout_ms / 1000,
        events,
        lag_max=settings.replica_lag_max_ms / 1000,
    )
    replication = Replication(
        run.role,
        settings.broker_name,
        settings.broker_id,
        store,
        in_sync,
        lambda: topics.data_version,
        run.epochs,
    )
    if run.role is not BrokerRole.SLAVE or run.master_address is None:
        return replication, []
    replication.follower = FollowerState(run.master_address)
    follower = ReplicaFollower(
        replication.follower, store, topics, token, settings.broker_id, settings.address, consumers
    )
    await follower.prepare()
    return replication, [asyncio.create_task(follower.run(), name="replica-follower")]


async def _open_store(settings: BrokerSettings, registry: CollectorRegistry) -> MessageStore:
    """Open (recover) the store. Before any write, the caller truncates it if it is to follow a new master
    (epoch_sync), then lowers consumer offsets past a queue's end."""
    store = MessageStore(settings.store_config(), store_host=settings.address)
    report = await asyncio.to_thread(store.open)
    log.info("store open at %s: %s", settings.store_dir, report)
    read_only = Gauge(
        "petrel_store_read_only",
        "1 once a sync of the store failed: it takes no writes until the broker restarts",
        registry=registry,
    )
    read_only.set_function(lambda: float(store.read_only))
    return store


def _start_store(app: FastAPI, store: MessageStore, topics: TopicTable) -> tuple[ScheduleQueuesAtStart, PullWaiters]:
    """What was scheduled at start is read, long polls wait on dispatches, and the store starts flushing."""
    schedule_at_start = ScheduleQueuesAtStart.read(store, topics)
    waiters = PullWaiters()
    store.listeners.append(waiters.on_dispatch)
    guard_scheduled(store, topics, app.state.events, app.state.metrics.registry)
    store.start()
    return schedule_at_start, waiters


async def _transactions(
    settings: BrokerSettings, store: MessageStore, topics: TopicTable, events: EventWriter, clock: Callable[[], float]
) -> Transactions:
    transactions = Transactions(
        store,
        topics,
        events,
        broker=settings.broker_name,
        check_max=settings.transaction_check_max,
        reserved_ms=int(settings.file_reserved_hours * 3_600_000),
        ended_kept=settings.ended_transactions_kept,
        clock=clock,
    )
    log.info("transactions: %d ended ones read from the op queue", await asyncio.to_thread(transactions.load))
    return transactions


async def _open_metadata(
    settings: BrokerSettings,
) -> tuple[Engine, TopicTable, ConsumerOffsets, GroupTable, RedrivenMarks]:
    settings.store_dir.mkdir(parents=True, exist_ok=True)
    engine = open_engine(settings.metadata_url)
    topics = TopicTable(TopicStore(engine))
    await topics.load()
    await ensure_system_topics(topics, len(settings.delay_levels))
    offsets = ConsumerOffsets(OffsetStore(engine), settings.offset_persist_interval_seconds)
    await offsets.load()
    groups = GroupTable(GroupStore(engine))
    await groups.load()
    redriven = RedrivenMarks(RedrivenStore(engine))
    await redriven.load()
    return engine, topics, offsets, groups, redriven


async def _consumer_mirror(
    settings: BrokerSettings, engine: Engine, offsets: ConsumerOffsets, pop: PopService, redriven: RedrivenMarks
) -> ConsumerMirror:
    """A slave's copy of its master's consumer state; the in-place attempts copied before are counted on here
    (this broker may be a promoted slave)."""
    attempts = AttemptStore(engine)
    pop.inherited_attempts = await asyncio.to_thread(attempts.load)
    return ConsumerMirror(offsets, pop.groups, settings.store_dir, redriven, attempts)


def _consumers(
    settings: BrokerSettings,
    topics: TopicTable,
    groups: GroupTable,
    store: MessageStore,
    offsets: ConsumerOffsets,
    waiters: PullWaiters,
    events: EventWriter,
    clock: Callable[[], float],
) -> tuple[PopService, Settlement]:
    pop = PopService(
        broker=settings.broker_name,
        topics=topics,
        groups=groups,
        store=store,
        offsets=offsets,
        waiters=waiters,
        events=events,
        receipt_key=receipt_key(settings.store_dir),
        delay_levels=settings.delay_levels,
        client_idle_ms=int(settings.broadcast_client_idle_seconds * 1000),
        clock=clock,
        scan_budget=settings.filter_scan_budget(),
    )
    return pop, Settlement(pop)


def _background(
    settings: BrokerSettings,
    pop: PopService,
    settlement: Settlement,
    clock: Callable[[], float],
    registry: CollectorRegistry,
) -> tuple[LagHistory, list[asyncio.Task[None]]]:
    """The leases' expiry and the groups' lag history (and its petrel_group_lag gauge), each a task of its own."""
    lag_history = LagHistory(settings.lag_sample_seconds, settings.lag_history_seconds, clock, registry)
    return lag_history, [
        asyncio.create_task(settlement.run(settings.lease_scan_ms / 1000), name="lease-expiry"),
        asyncio.create_task(lag_history.run(pop), name="lag-history"),
    ]


async def _retention(store: MessageStore, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            deleted = store.retention_tick()
        except OSError:
            log.exception("deleting expired CommitLog segments failed; will try again")
            continue
        if deleted:
            log.info("retention deleted %d CommitLog segment(s)", deleted)
