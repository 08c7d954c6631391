"""txcheck on a Redis that asks for a password and on one that speaks only TLS (rediss://).

A real Celery worker process runs a scan whose check-back commits; its log shows Redis's
URL only masked. A wrong password makes the health process not ready, naming Redis, never
the password.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from libs import webhooks
from libs.broker_api.wire import CHECK_IMMUNITY
from libs.producer_groups import ProducerGroupStore
from services.txcheck.app import create_app
from services.txcheck.celery_app import SCAN_TASK, create_celery
from services.txcheck.settings import TxcheckSettings
from tests.support.apps import in_process
from tests.support.redis_servers import PASSWORD, RedisServer, make_tls_files, started
from tests.support.serving import ServedApp, serving
from tests.support.txcheck import Producer, TxBroker, TxcheckProcess
from tests.support.waiting import wait_until


@pytest.fixture(scope="module", params=["password", "tls"])
def secured_redis(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    folder = tmp_path_factory.mktemp(f"redis-{request.param}")
    tls = make_tls_files(folder / "certs") if request.param == "tls" else None
    with started(folder, tls) as server:
        yield server


async def test_ready_with_the_password_and_not_with_a_wrong_one_naming_redis_not_the_password(
    secured_redis: RedisServer,
) -> None:
    async for client in in_process(create_app(TxcheckSettings(redis_url=secured_redis.url))):
        assert (await client.get("/readyz")).json()["checks"] == {"redis": "ok"}
    wrong = secured_redis.url_with_password("a-wrong-password")
    async for client in in_process(create_app(TxcheckSettings(redis_url=wrong))):
        answer = await client.get("/readyz")
        said = answer.json()["checks"]["redis"]
        assert answer.status_code == 503
        assert said.startswith(f"Redis at {secured_redis.url.split('://')[0]}://:***@127.0.0.1:{secured_redis.port}/0")
        assert "refused the credentials" in said
        assert "a-wrong-password" not in answer.text


@pytest.fixture
def producer(producer_groups: tuple[str, ProducerGroupStore]) -> Iterator[Producer]:
    _, store = producer_groups
    producer = Producer(webhooks.new_secret())
    with serving(producer.app()) as served:
        store.put("shop", f"{served.url}/checkback", producer.secret)
        yield producer


def test_a_scan_on_a_worker_over_the_secured_redis_commits_and_its_log_masks_the_password(
    secured_redis: RedisServer,
    tmp_path: Path,
    nameserver: ServedApp,
    tx_broker: TxBroker,
    producer: Producer,
    producer_groups: tuple[str, ProducerGroupStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {
        "PETREL_DATA_DIR": str(tmp_path / "data"),
        "PETREL_NAMESERVERS": nameserver.address,
        "PETREL_REDIS_URL": secured_redis.url,
        "PETREL_DATABASE_URL": producer_groups[0],
        "PETREL_EVENTS_ENABLED": "false",
        "PETREL_TXCHECK_WORKER_CONCURRENCY": "1",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    worker = TxcheckProcess("worker", env, tmp_path / "logs")
    worker.start()
    app = create_celery(TxcheckSettings())
    try:
        producer.answers = {"C": "COMMIT"}
        tx_broker.put_half("C", {CHECK_IMMUNITY: "0"})
        app.tasks[SCAN_TASK].apply_async()
        wait_until(
            lambda: tx_broker.state("C")["state"] == "COMMITTED",
            "the check-back's COMMIT",
            timeout=30,
            context=lambda: f"the worker's log:\n{worker.log_tail()}",
        )
    finally:
        app.close()
        worker.stop()
    log = worker.log_path.read_text(errors="replace")
    assert f":**@127.0.0.1:{secured_redis.port}" in log, "Celery's banner names the Redis it uses, masked"
    assert PASSWORD not in log
