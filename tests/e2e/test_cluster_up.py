"""`petrel up --brokers 2` as a real subprocess, driven the way a curl user would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from services.etl.nightly import NIGHTLY_TASK, create_celery, lock_key
from services.etl.settings import EtlSettings
from tests.support.serving import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

EXPIRY_SECONDS = 3


def free_port_pair() -> int:
    for _ in range(50):
        port = free_port()
        if port < 65000 and free_port_is(port + 1):
            return port
    raise RuntimeError("no two consecutive free ports")


def free_port_is(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Cluster:
    process: subprocess.Popen[str]
    data_dir: Path
    gateway: str
    nameserver: str
    output: Path

    def state(self) -> dict[str, object]:
        return json.loads((self.data_dir / "run" / "cluster.json").read_text())  # type: ignore[no-any-return]

    def pid_of(self, name: str) -> int:
        processes = self.state()["processes"]
        assert isinstance(processes, list)
        return int(next(p["pid"] for p in processes if p["name"] == name))

    def all_pids(self) -> list[int]:
        processes = self.state()["processes"]
        assert isinstance(processes, list)
        return [int(p["pid"]) for p in processes]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    data_dir = tmp_path / "data"
    ports = {
        "--gateway-port": free_port(),
        "--nameserver-port": free_port(),
        "--broker-port": free_port_pair(),
        "--timer-port": free_port(),
        "--txcheck-port": free_port(),
        "--push-port": free_port(),
    }
    argv = [sys.executable, "-m", "deploy", "up", "--brokers", "2", "--data-dir", str(data_dir)]
    for flag, port in ports.items():
        argv += [flag, str(port)]
    env = os.environ | {
        "PETREL_NAMESERVER_BROKER_EXPIRY_SECONDS": str(EXPIRY_SECONDS),
        "PETREL_NAMESERVER_SCAN_INTERVAL_SECONDS": "0.5",
        "PETREL_BROKER_REGISTER_INTERVAL_SECONDS": "0.5",
        "PETREL_BROKER_SEGMENT_SIZE": str(16 * 1024 * 1024),
        "PETREL_BROKER_INDEX_SLOT_COUNT": "65536",
        "PETREL_BROKER_INDEX_MAX_ENTRIES": "1000000",
    }
    output = tmp_path / "petrel-up.out"
    with output.open("w") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    cluster = Cluster(
        process,
        data_dir,
        f"http://127.0.0.1:{ports['--gateway-port']}",
        f"http://127.0.0.1:{ports['--nameserver-port']}",
        output,
    )
    try:
        wait_until(lambda: "Petrel is up." in output.read_text() or process.poll() is not None, "cluster up", 90)
        assert process.poll() is None, f"petrel up exited:\n{output.read_text()}"
        yield cluster
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(30)


def test_cluster_serves_routes_survives_a_dead_broker_and_stops_clean(cluster: Cluster) -> None:
    pids = cluster.all_pids()
    assert len(pids) == 11, cluster.state()
    worker = cluster.pid_of("txcheck-worker")
    wait_until(lambda: bool(pool_processes(worker)), "the Celery worker's pool processes", 20)
    pids += pool_processes(worker)

    the_etl_worker_takes_a_nightly_run_from_its_queue(cluster)

    created = httpx.put(f"{cluster.gateway}/v1/topics/orders", timeout=10)
    assert created.status_code == 201, created.text
    assert created.json()["queues"] == 16

    route = httpx.get(f"{cluster.nameserver}/internal/routes/orders").json()
    assert [q["broker_name"] for q in route["queues"]] == ["broker-a", "broker-b"]

    os.kill(cluster.pid_of("broker-b"), signal.SIGKILL)

    def only_broker_a() -> bool:
        answer = httpx.get(f"{cluster.nameserver}/internal/routes/orders").json()
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


def the_etl_worker_takes_a_nightly_run_from_its_queue(cluster: Cluster) -> None:
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
