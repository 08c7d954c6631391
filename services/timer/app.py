"""The timer service: delay levels and the timer wheel, delivering scheduled messages when due."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated, cast

from fastapi import APIRouter, Depends, FastAPI, Request

from libs.broker_api.client import BrokerClient
from libs.broker_api.nameservers import NameserverClient
from libs.http.app import add_routers, service_app
from libs.http.client import ClientOptions, InternalClient
from libs.http.transport import Transport
from libs.problem import PROBLEM_RESPONSES
from libs.tasks import cancelled
from libs.timer import TimerStore
from services.timer.metrics import TimerCollector
from services.timer.progress import WHEEL, TimerProgress
from services.timer.scheduler import TimerScheduler
from services.timer.schemas import Cancellation, CancellationAck, Lateness, LevelPending, TimerStats
from services.timer.settings import TimerSettings

log = logging.getLogger(__name__)


async def _scheduler(request: Request) -> TimerScheduler:
    return cast(TimerScheduler, request.state.scheduler)


Scheduler = Annotated[TimerScheduler, Depends(_scheduler)]
router = APIRouter(prefix="/internal", tags=["timer"], responses=PROBLEM_RESPONSES)


@router.get("/stats", operation_id="getTimerStats", response_model=TimerStats)
async def get_stats(scheduler: Scheduler, request: Request) -> TimerStats:
    """Pending by level and in the wheel, the next due time, and the lateness of recent deliveries."""
    settings = cast(TimerSettings, request.app.state.settings)
    counters = scheduler.counters
    wheel = scheduler.store.stats(max_scan=10_000)
    pending, wheel_pending = scheduler.pending(wheel.pending)
    levels = len(settings.delay_levels)
    sample = sorted(counters.lateness_ms)
    next_due = [d for d in scheduler.next_due_times() if d is not None]
    if wheel.next_slot_ms is not None:
        next_due.append(wheel.next_slot_ms)
    return TimerStats(
        levels=[LevelPending(level=q + 1, pending=pending.get(q, 0)) for q in range(levels)],
        wheel_pending=wheel_pending,
        wheel_rolled=wheel.rolled,
        next_due_ms=min(next_due) if next_due else None,
        delivered=counters.delivered,
        rolled=counters.rolled,
        cancelled=counters.cancelled,
        retried=counters.retried,
        failed=counters.failed,
        lateness=Lateness(
            count=len(sample),
            p50_ms=sample[len(sample) // 2] if sample else 0,
            p99_ms=sample[min(len(sample) - 1, len(sample) * 99 // 100)] if sample else 0,
            max_ms=sample[-1] if sample else 0,
        ),
    )


@router.post("/cancellations", operation_id="cancelScheduled", response_model=CancellationAck)
async def cancel_scheduled(scheduler: Scheduler, body: Cancellation) -> CancellationAck:
    """Never deliver the scheduled message stored at this offset (kept until its time comes, counted now)."""
    where = WHEEL if body.level is None else body.level - 1
    if scheduler.progress.cancel(body.broker, body.physical_offset, where):
        scheduler.counters.cancelled += 1
    await asyncio.to_thread(scheduler.progress.save)
    return CancellationAck(broker=body.broker, physical_offset=body.physical_offset, cancelled=True)


def create_app(settings: TimerSettings, *, transport: Transport | None = None) -> FastAPI:
    """The timer; `transport`: how it calls nameservers and brokers (TCP unless given: tests give an in-process one)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, object]]:
        settings.store_dir.mkdir(parents=True, exist_ok=True)
        progress = TimerProgress(settings.store_dir / "progress.json")
        progress.load()
        store = TimerStore(
            settings.store_dir / "wheel",
            now_ms=_now_ms(),
            precision_ms=settings.precision_ms,
            window_ms=settings.window_ms,
            max_delay_ms=settings.max_delay_ms,
            segment_bytes=settings.timer_log_segment_bytes,
        )
        token = settings.cluster_token()
        async with InternalClient(ClientOptions(token=token, timeout=5.0), transport) as client:
            scheduler = TimerScheduler(
                store,
                progress,
                NameserverClient(client, settings.nameservers),
                BrokerClient(client),
                app.state.events,
                broker_refresh_seconds=settings.broker_refresh_seconds,
                checkpoint_interval_ms=settings.checkpoint_interval_ms,
                max_delay_ms=settings.max_delay_ms,
                max_attempts=settings.delivery_max_attempts,
                retention_check_ms=settings.retention_check_ms,
            )
            collector = TimerCollector(scheduler)
            app.state.metrics.registry.register(collector)
            task = asyncio.create_task(scheduler.run(settings.scan_interval_ms), name="timer-scheduler")
            try:
                yield {"scheduler": scheduler}
            finally:
                await cancelled(task)
                app.state.metrics.registry.unregister(collector)
                scheduler.checkpoint()
                store.close()

    app = service_app("timer", settings, lifespan=lifespan, description="Delay levels and the timer wheel.")
    app.state.settings = settings
    add_routers(app, router)
    return app


def _now_ms() -> int:
    return int(time.time() * 1000)
