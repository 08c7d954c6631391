"""txcheck's tasks on a real Celery worker process and the real Redis: scans resolve, killed workers lose nothing."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from libs import webhooks
from libs.broker_api.wire import CHECK_IMMUNITY
from libs.producer_groups import ProducerGroupStore
from services.txcheck.celery_app import CHECK_TASK, SCAN_TASK, celery_config, create_celery
from services.txcheck.settings import TxcheckSettings
from tests.support.serving import ServedApp, free_port, serving
from tests.support.txcheck import REDIS_URL, Producer, TxBroker, TxcheckProcess
from tests.support.waiting import wait_until

IMMUNE = {CHECK_IMMUNITY: "0"}


@pytest.fixture
def producer(producer_groups: tuple[str, ProducerGroupStore]) -> Iterator[Producer]:
    _, store = producer_groups
    producer = Producer(webhooks.new_secret())
    with serving(producer.app()) as served:
        store.put("shop", f"{served.url}/checkback", producer.secret)
        yield producer
        producer.released.set()


@pytest.fixture
def txcheck_env(
    tmp_path: Path, nameserver: ServedApp, redis_prefix: str, producer_groups: tuple[str, ProducerGroupStore]
) -> dict[str, str]:
    url, _ = producer_groups
    return {
        "PETREL_DATA_DIR": str(tmp_path / "data"),
        "PETREL_NAMESERVERS": nameserver.address,
        "PETREL_REDIS_URL": REDIS_URL,
        "PETREL_DATABASE_URL": url,
        "PETREL_EVENTS_ENABLED": "false",
        "PETREL_TXCHECK_REDIS_KEY_PREFIX": redis_prefix,
        "PETREL_TXCHECK_WORKER_CONCURRENCY": "2",
        # A task held longer is given again while it runs: CI once took 5 s from the worker's start to the first
        # check-back (its pool processes starting under load), so a second copy of the task may have been out when
        # the test killed the pool (the run saw no check after it). Longer than that, short enough for the wait
        # after the worker's restart.
        "PETREL_TXCHECK_VISIBILITY_TIMEOUT_SECONDS": "8",
        "PETREL_TXCHECK_CHECK_RETRIES": "1",
        "PETREL_TXCHECK_CHECK_RETRY_BACKOFF_MAX_SECONDS": "1",
    }


@pytest.fixture
def worker(txcheck_env: dict[str, str], tmp_path: Path) -> Iterator[TxcheckProcess]:
    process = TxcheckProcess("worker", txcheck_env, tmp_path / "logs")
    process.start()
    yield process
    process.stop()


@pytest.fixture
def send(txcheck_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Sends a task to the worker's queues, as beat and the scan do."""
    for name, value in txcheck_env.items():
        monkeypatch.setenv(name, value)
    app = create_celery(TxcheckSettings())

    def send_task(name: str, *args: object) -> None:
        app.tasks[name].apply_async(args=args)

    yield send_task
    app.close()


def wait_for(check: Callable[[], bool], what: str, worker: TxcheckProcess, timeout: float = 20.0) -> None:
    def context() -> str:
        return f"the worker's Redis keys: {redis_keys(worker.env)}\nthe worker's log:\n{worker.log_tail()}"

    wait_until(check, what, timeout, context=context)


def redis_keys(env: dict[str, str]) -> dict[str, int]:
    """The size of each of the worker's keys in Redis (its queues, its unacknowledged tasks): where a task is."""
    prefix = env["PETREL_TXCHECK_REDIS_KEY_PREFIX"]
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        sizes: dict[str, Callable[[str], Any]] = {
            "list": client.llen,
            "hash": client.hlen,
            "zset": client.zcard,
            "set": client.scard,
        }
        found: dict[str, int] = {}
        for key in sorted(client.scan_iter(match=prefix + "*", count=1000)):
            size = sizes.get(str(client.type(key)))
            found[key.removeprefix(prefix)] = int(size(key)) if size is not None else -1
        return found
    finally:
        client.close()


def test_a_scan_on_the_worker_resolves_what_the_producer_says_and_keeps_the_rest_open(
    worker: TxcheckProcess, send: Callable[..., None], tx_broker: TxBroker, producer: Producer
) -> None:
    producer.answers = {"C": "COMMIT", "R": "ROLLBACK"}
    for message_id in ("C", "R", "U"):
        tx_broker.put_half(message_id, IMMUNE)

    send(SCAN_TASK)

    wait_for(lambda: len(producer.requests) == 3 and tx_broker.state("R")["state"] == "ROLLED_BACK", "3 checks", worker)
    wait_for(lambda: tx_broker.state("C")["state"] == "COMMITTED", "C committed", worker)
    assert sorted(m for m, _ in producer.requests) == ["C", "R", "U"]
    assert (tx_broker.state("U")["state"], tx_broker.state("U")["check_count"]) == ("OPEN", 1)
    assert [r.message_id for r in tx_broker.records("orders", 1)] == ["C"]
    assert "superuser" not in worker.log_tail(200), "the worker warns about root though it accepts JSON only"


def test_a_check_whose_worker_is_killed_is_run_again_and_commits_once(
    worker: TxcheckProcess,
    send: Callable[..., None],
    tx_broker: TxBroker,
    producer: Producer,
    txcheck_env: dict[str, str],
) -> None:
    producer.answers = {"A": "COMMIT"}
    producer.hold_first = 2
    stored = tx_broker.put_half("A")

    send(CHECK_TASK, "broker-a", tx_broker.served.address, [("A", stored["physical_offset"])])
    wait_for(lambda: len(producer.requests) == 1, "the first check-back", worker)
    for child in worker.children():  # a pool process dies: the task goes back to the queue at once
        os.kill(child, signal.SIGKILL)
    wait_for(lambda: len(producer.requests) == 2, "the check again after its pool process died", worker)
    worker.kill()  # the whole worker dies with the task unacknowledged: Redis gives it back after the timeout
    assert tx_broker.state("A")["state"] == "OPEN"
    left_holding_the_restore_lock(TxcheckSettings())  # as when the kill lands in a look for such tasks (`send`'s env)
    worker.start()

    wait_for(lambda: tx_broker.state("A")["state"] == "COMMITTED", "the commit after the worker's restart", worker)
    assert len(producer.requests) == 3
    assert len({webhook_id for _, webhook_id in producer.requests}) == 3, "a webhook-id was used twice"
    assert [r.message_id for r in tx_broker.records("orders", 1)] == ["A"]


def left_holding_the_restore_lock(settings: TxcheckSettings) -> None:
    """The lock a worker takes, each second, to look for tasks unacknowledged past the visibility timeout, left
    taken as a worker killed during a look leaves it (kombu's Mutex: SET NX with the configured expiry)."""
    expire = float(celery_config(settings)["broker_transport_options"].get("unacked_mutex_expire", 300))  # kombu's
    client = redis.Redis.from_url(REDIS_URL)
    try:
        key = f"{settings.redis_key_prefix}unacked_mutex"
        assert client.set(key, "killed", nx=True, px=int(expire * 1000)), "a look of the killed worker's is under way"
    finally:
        client.close()


def test_checks_whose_broker_does_not_answer_are_retried_then_given_up(
    worker: TxcheckProcess, send: Callable[..., None], tx_broker: TxBroker, producer: Producer
) -> None:
    producer.answers = {"A": "COMMIT"}
    stored = tx_broker.put_half("A")
    gone = f"127.0.0.1:{free_port()}"

    send(CHECK_TASK, "broker-a", tx_broker.served.address, [("A", stored["physical_offset"])])
    send(CHECK_TASK, "broker-x", gone, [("X", 0)])

    wait_for(lambda: tx_broker.state("A")["state"] == "COMMITTED", "the check of a live broker", worker)
    wait_for(lambda: "1 checks on broker-x given up after 1 retries" in worker.log_tail(), "the retry", worker)
    assert worker.log_tail(100).count("check of X: POST") == 0
    assert worker.log_tail(100).count(f"check of X: broker broker-x at {gone} did not answer") == 2, "not tried twice"


def test_the_workers_processes_follow_the_cores_up_to_two_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PETREL_TXCHECK_WORKER_CONCURRENCY", raising=False)
    assert TxcheckSettings().concurrency == min(2, os.cpu_count() or 1)
    monkeypatch.setenv("PETREL_TXCHECK_WORKER_CONCURRENCY", "5")
    assert TxcheckSettings().concurrency == 5
