"""txcheck's health process: ready when the Redis its workers use answers."""

from __future__ import annotations

from pathlib import Path

import redis

from services.txcheck.app import create_app
from services.txcheck.celery_app import CHECK_QUEUE, CHECK_TASK, SCAN_TASK, create_celery
from services.txcheck.settings import TxcheckSettings
from tests.support.apps import in_process
from tests.support.serving import free_port
from tests.support.txcheck import REDIS_URL


async def test_ready_when_redis_answers() -> None:
    async for client in in_process(create_app(TxcheckSettings(redis_url=REDIS_URL))):
        answer = await client.get("/readyz")
        assert (answer.status_code, answer.json()["checks"]) == (200, {"redis": "ok"})


async def test_not_ready_without_redis() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    async for client in in_process(create_app(TxcheckSettings(redis_url=url))):
        assert (await client.get("/healthz")).status_code == 200
        answer = await client.get("/readyz")
        assert answer.status_code == 503
        assert answer.json()["checks"]["redis"].startswith(f"Redis at {url} did not answer: ")


def test_the_defaults_are_the_issues() -> None:
    settings = TxcheckSettings()
    assert (settings.scan_interval_seconds, settings.transaction_timeout_ms, settings.transaction_check_max) == (
        30.0,
        6000,
        15,
    )
    assert settings.port == 10941


def test_the_celery_app_acknowledges_checks_late_and_scans_on_a_schedule(tmp_path: Path) -> None:
    settings = TxcheckSettings(
        data_dir=tmp_path, scan_interval_seconds=1.5, visibility_timeout_seconds=8, redis_key_prefix="p:"
    )
    app = create_celery(settings)
    conf = app.conf
    check, scan = app.tasks[CHECK_TASK], app.tasks[SCAN_TASK]
    assert (conf.task_acks_late, conf.task_reject_on_worker_lost, conf.worker_prefetch_multiplier) == (True, True, 1)
    assert conf.result_backend is None
    assert conf.broker_transport_options["visibility_timeout"] == 8
    assert conf.broker_transport_options["unacked_mutex_expire"] == 8, "a killed look holds the others back no longer"
    assert conf.broker_transport_options["global_keyprefix"] == "p:"
    assert conf.beat_schedule["scan"]["task"] == SCAN_TASK
    assert conf.beat_schedule["scan"]["schedule"] == 1.5
    assert conf.beat_schedule_filename == str(tmp_path / "txcheck" / "beat-schedule")
    assert (check.acks_late, check.time_limit, check.max_retries) == (True, 30, 5)
    assert scan.acks_late is False
    assert conf.task_routes[CHECK_TASK]["queue"] == "txcheck.check"
    app.close()


def test_the_backlog_a_scan_watches_is_the_queue_checks_wait_in(
    tmp_path: Path, redis_prefix: str, redis_client: redis.Redis
) -> None:
    app = create_celery(TxcheckSettings(data_dir=tmp_path, redis_key_prefix=redis_prefix, redis_url=REDIS_URL))
    app.tasks[CHECK_TASK].apply_async(args=("broker-a", "127.0.0.1:1", [("A", 0)]))
    assert redis_client.llen(f"{redis_prefix}{CHECK_QUEUE}") == 1
    app.close()
