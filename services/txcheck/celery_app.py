"""The txcheck Celery application: `create_celery(settings)` builds it; nothing is built at import time.

Redis is the Celery broker (no result backend: nothing waits for a task's
result). Two tasks, on two queues so that a flood of checks never delays a scan:

- `txcheck.scan` (queue `txcheck.scan`), started by beat every
  `scan_interval_seconds` and expiring after one interval (a scan that waited
  longer is superseded by the next): runs `HalfScanner` over every broker.
- `txcheck.check` (queue `txcheck.check`): the check-backs of up to
  `check_batch` half copies of one broker, given by message id and CommitLog
  offset, run side by side (one task per copy would spend more on Celery than
  on the check). Acknowledged late and given back when its worker dies
  (`task_reject_on_worker_lost`; a worker killed with -9 never acknowledges, so
  Redis gives the task to a worker again after `visibility_timeout_seconds`);
  killed past its time limit; the checks whose broker did not answer are
  retried, with exponential backoff and jitter.

Every key, Celery's queues included, starts with `redis_key_prefix`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from celery import Celery, Task
from celery.signals import after_setup_logger, worker_process_shutdown, worker_shutdown
from celery.utils.time import get_exponential_backoff_interval

from libs.celery_json import JSON_ONLY
from libs.errors import NameserverUnavailable
from libs.redis_url import celery_tls
from services.txcheck.scan import CheckOrder, HalfScanner, ScanOptions
from services.txcheck.settings import TxcheckSettings

if TYPE_CHECKING:
    from services.txcheck.runtime import Runtime, RuntimeHolder

log = logging.getLogger(__name__)

SCAN_TASK = "txcheck.scan"
CHECK_TASK = "txcheck.check"
SCAN_QUEUE = "txcheck.scan"
CHECK_QUEUE = "txcheck.check"
QUEUES = (SCAN_QUEUE, CHECK_QUEUE)


def celery_config(settings: TxcheckSettings) -> dict[str, Any]:
    visibility = settings.visibility_timeout_seconds
    return {
        "broker_url": settings.redis_url,
        **celery_tls(settings.redis_url),
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            "global_keyprefix": settings.redis_key_prefix,
            "visibility_timeout": visibility,
            # how often a worker looks for tasks whose worker died: a few times per visibility timeout
            "unacked_restore_interval": max(1, min(10, int(visibility / 4))),
            "unacked_restore_throttle": 1,
            # the lock of that look: a worker killed -9 while holding it (a look takes milliseconds, every second)
            # left every worker's looks refused for kombu's default 300 s; held no longer than a visibility timeout,
            # a look that outlives it is still safe (each task is given back in a transaction watching the unacked)
            "unacked_mutex_expire": max(1, math.ceil(visibility)),
            "socket_timeout": 10,
            "socket_connect_timeout": 5,
        },
        **JSON_ONLY,
        "result_backend": None,
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_default_queue": CHECK_QUEUE,
        "task_routes": {SCAN_TASK: {"queue": SCAN_QUEUE}, CHECK_TASK: {"queue": CHECK_QUEUE}},
        "worker_prefetch_multiplier": 1,
        "worker_concurrency": settings.concurrency,
        "worker_enable_remote_control": False,
        "worker_send_task_events": False,
        "beat_schedule": {
            "scan": {
                "task": SCAN_TASK,
                "schedule": settings.scan_interval_seconds,
                "options": {"expires": settings.scan_interval_seconds},
            }
        },
        "beat_schedule_filename": str(settings.state_dir / "beat-schedule"),
        "beat_max_loop_interval": max(0.1, min(5.0, settings.scan_interval_seconds / 2)),
        "timezone": "UTC",
        "enable_utc": True,
    }


def create_celery(settings: TxcheckSettings) -> Celery:
    app = Celery("txcheck", set_as_current=False)
    app.conf.update(celery_config(settings))
    runtime = LazyRuntime(settings)

    # shared=False: a shared task would be added to every Celery app made later in this process
    @app.task(
        name=CHECK_TASK,
        shared=False,
        bind=True,
        acks_late=True,
        time_limit=settings.check_time_limit_seconds,
        soft_time_limit=settings.check_time_limit_seconds - 3,
        max_retries=settings.check_retries,
    )
    def check(task: Task[Any, Any], broker: str, address: str, halves: list[tuple[str, int]]) -> list[str]:
        """Ask the producers about these half messages (message id, CommitLog offset) of one broker, side by side,
        and end each by its answer (see checkback); retry, with backoff, those whose broker did not answer."""
        resources = runtime.get()
        orders = [CheckOrder(broker, address, message_id, offset) for message_id, offset in halves]
        outcomes, unanswered = resources.checkback.check_many(orders, resources.check_pool)
        if unanswered:
            retries = task.request.retries
            if retries >= settings.check_retries:
                log.error("%d checks on %s given up after %d retries", len(unanswered), broker, retries)
            else:
                countdown = get_exponential_backoff_interval(1, retries, settings.check_retry_backoff_max_seconds, True)
                again = [(o.message_id, o.physical_offset) for o in unanswered]
                raise task.retry(args=(broker, address, again), countdown=countdown)
        return outcomes

    def dispatch(orders: Sequence[CheckOrder]) -> None:
        first = orders[0]
        check.apply_async(args=(first.broker, first.address, [(o.message_id, o.physical_offset) for o in orders]))

    @app.task(
        name=SCAN_TASK,
        shared=False,
        acks_late=False,
        time_limit=settings.scan_time_limit_seconds + 30,
        soft_time_limit=settings.scan_time_limit_seconds + 15,
    )
    def scan() -> list[dict[str, Any]]:
        """Find the half messages due for a check on every broker and dispatch their checks."""
        resources = runtime.get()
        queued_checks = f"{settings.redis_key_prefix}{CHECK_QUEUE}"
        scanner = HalfScanner(
            resources.api,
            resources.redis,
            scan_options(settings),
            dispatch,
            backlog=lambda: cast(int, resources.redis.llen(queued_checks)),
        )
        try:
            reports = scanner.scan(settings.scan_time_limit_seconds)
        except NameserverUnavailable as exc:
            log.warning("no scan: %s", exc.detail)
            return []
        for report in reports:
            if report.dispatched or report.failures or report.stopped not in {"caught up", "not due"}:
                log.info("scan of %s: %s", report.broker, report)
        return [vars_of(report) for report in reports]

    def close_runtime(**_: object) -> None:
        runtime.close()

    worker_process_shutdown.connect(close_runtime, weak=False)
    worker_shutdown.connect(close_runtime, weak=False)
    after_setup_logger.connect(quiet_task_lines, weak=False)
    return app


class LazyRuntime:
    """The process's RuntimeHolder, whose module (HTTP clients, SQLAlchemy, the event writer) is imported on first use:
    beat, which runs no task, never imports it (~25 MB less); a worker imports it before it forks its pool
    (`python -m services.txcheck worker`), so its children share those pages."""

    def __init__(self, settings: TxcheckSettings) -> None:
        self.settings = settings
        self._holder: RuntimeHolder | None = None

    def get(self) -> Runtime:
        if self._holder is None:
            from services.txcheck.runtime import RuntimeHolder  # noqa: PLC0415  (lazy: see the class)

            self._holder = RuntimeHolder(self.settings)
        return self._holder.get()

    def close(self) -> None:
        if self._holder is not None:
            self._holder.close()


def quiet_task_lines(**_: object) -> None:
    """No line per task received and succeeded, nor per HTTP call (thousands a second under load).

    Failures are still logged.
    """
    for name in ("celery.worker.strategy", "celery.app.trace", "httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


def scan_options(settings: TxcheckSettings) -> ScanOptions:
    return ScanOptions(
        transaction_timeout_ms=settings.transaction_timeout_ms,
        key_prefix=settings.redis_key_prefix,
        batch=settings.scan_batch,
        parallelism=settings.scan_parallelism,
        lock_seconds=max(10.0, 3 * settings.broker_timeout_seconds),
        check_batch=settings.check_batch,
        max_backlog=settings.max_check_backlog,
        ended_ttl_seconds=settings.ended_ttl_seconds,
    )


def vars_of(report: object) -> dict[str, Any]:
    return {name: getattr(report, name) for name in getattr(report, "__slots__", ())}
