"""`petrel up --brokers 2` as a real subprocess, driven the way a curl user would."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from services.etl.nightly import NIGHTLY_TASK, create_celery, lock_key
from services.etl.settings import EtlSettings
from tests.support.petrel_up import UpCluster, petrel_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

EXPIRY_SECONDS = 3


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[UpCluster]:
    env = {
        "PETREL_NAMESERVER_BROKER_EXPIRY_SECONDS": str(EXPIRY_SECONDS),
        "PETREL_NAMESERVER_SCAN_INTERVAL_SECONDS": "0.5",
        "PETREL_BROKER_REGISTER_INTERVAL_SECONDS": "0.5",
        "PETREL_BROKER_SEGMENT_SIZE": str(16 * 1024 * 1024),
        "PETREL_BROKER_INDEX_SLOT_COUNT": "65536",
        "PETREL_BROKER_INDEX_MAX_ENTRIES": "1000000",
    }
    with petrel_up(tmp_path, "--brokers", "2", env=env) as running:
        yield running


@pytest.mark.timeout(180)  # 76 s with the CPU at a quarter (a cgroup quota of half a core of two): twice that
def test_cluster_serves_routes_survives_a_dead_broker_and_stops_clean(cluster: UpCluster) -> None:
    pids = cluster.all_pids()
    assert len(pids) == 11, cluster.state()
    worker = cluster.pid_of("txcheck-worker")
    wait_until(lambda: bool(pool_processes(worker)), "the Celery worker's pool processes", 20)
    pids += pool_processes(worker)

    the_etl_worker_takes_a_nightly_run_from_its_queue(cluster)

    created = httpx.put(f"{cluster.gateway}/v1/topics/orders", timeout=10)
    assert created.status_code == 201, created.text
    assert created.json()["queues"] == 16

    internal = cluster.internal_headers()
    route = httpx.get(f"{cluster.nameserver}/internal/routes/orders", headers=internal).json()
    assert [q["broker_name"] for q in route["queues"]] == ["broker-a", "broker-b"]

    os.kill(cluster.pid_of("broker-b"), signal.SIGKILL)

    def only_broker_a() -> bool:
        answer = httpx.get(f"{cluster.nameserver}/internal/routes/orders", headers=internal).json()
        return [q["broker_name"] for q in answer["queues"]] == ["broker-a"]

    wait_until(only_broker_a, "broker-b dropped from the route after the expiry", EXPIRY_SECONDS + 10)
    described = httpx.get(f"{cluster.gateway}/v1/topics/orders").json()
    assert [b["broker"] for b in described["brokers"]] == ["broker-a"]
    wait_until(lambda: "broker-b (pid" in cluster.output.read_text(), "the dead broker reported", 10)
    assert "exited with code -9" in cluster.output.read_text()

    cluster.process.send_signal(signal.SIGTERM)
    assert cluster.process.wait(30) == 0, cluster.output.read_text()
    leftovers = [pid for pid in pids if alive(pid)]
    assert leftovers == [], f"processes left after stop: {leftovers}"
    assert not (cluster.data_dir / "run" / "cluster.json").exists()
    assert (cluster.data_dir / "logs" / "gateway.log").exists()
    assert "beat: Starting" in (cluster.data_dir / "logs" / "txcheck-beat.log").read_text()
    assert "ready." in (cluster.data_dir / "logs" / "txcheck-worker.log").read_text()
    assert list((cluster.data_dir / "txcheck").glob("beat-schedule*")), "beat's schedule is not in the data dir"
    assert "beat: Starting" in (cluster.data_dir / "logs" / "etl-beat.log").read_text()
    assert list((cluster.data_dir / "etl").glob("beat-schedule*")), "the ETL beat's schedule is not in the data dir"


def the_etl_worker_takes_a_nightly_run_from_its_queue(cluster: UpCluster) -> None:
    """A run sent as beat sends it, under the cluster's Redis prefix, while the lock is held: the worker skips it
    (a real run would start Spark)."""
    settings = EtlSettings(data_dir=cluster.data_dir)  # the prefix `python -m services.etl now` would use
    prefix = settings.key_prefix
    client = redis.Redis.from_url(settings.redis_url)
    try:
        client.set(lock_key(settings), "a run", ex=60)
        with create_celery(settings) as app:
            app.send_task(NIGHTLY_TASK)
        log = cluster.data_dir / "logs" / "etl-worker.log"
        wait_until(lambda: "skipped: a run holds the lock" in log.read_text(), "the ETL worker took the run", 20)
    finally:
        keys = list(client.scan_iter(match=prefix + "*"))
        if keys:
            client.delete(*keys)
        client.close()


def pool_processes(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
