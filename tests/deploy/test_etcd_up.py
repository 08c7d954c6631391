"""`petrel up --replicas`'s etcd: what the plan gives every process, and the private members, real etcd processes."""

import base64
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from bench.loopback import free_port_run
from deploy import etcd_server
from deploy.etcd_server import EtcdNotAvailable
from deploy.plan import ProcessSpec, UpOptions, plan_cluster
from deploy.supervisor import StartupFailed, Supervisor
from libs.etcd import EtcdSettings
from tests.support.etcd import etcd_binary
from tests.support.petrel_up import petrel, petrel_env
from tests.support.waiting import wait_until

ENDPOINTS = "http://127.0.0.1:2379,http://127.0.0.1:2381,http://127.0.0.1:2383"


def petrel_processes(specs: list[ProcessSpec]) -> list[ProcessSpec]:
    return [s for s in specs if s.module]


def test_replicas_start_three_etcd_members_first_and_every_process_is_told_where_they_are(tmp_path: Path) -> None:
    specs = plan_cluster(UpOptions(data_dir=tmp_path, replicas=1), "redis://x")

    members = specs[:3]
    assert [(s.name, s.port, s.other_ports, s.health_path) for s in members] == [
        ("etcd-1", 2379, (2380,), "/health"),
        ("etcd-2", 2381, (2382,), "/health"),
        ("etcd-3", 2383, (2384,), "/health"),
    ]
    assert f"--data-dir={tmp_path / 'etcd' / 'member-2'}" in members[1].command
    peers = "member-1=http://127.0.0.1:2380,member-2=http://127.0.0.1:2382,member-3=http://127.0.0.1:2384"
    assert f"--initial-cluster={peers}" in members[0].command
    assert all(s.restart for s in members), "a killed member is started again"
    assert not any(s.restart for s in specs[3:])
    assert {(s.env["PETREL_ETCD_ENDPOINTS"], s.env["PETREL_ETCD_PREFIX"]) for s in petrel_processes(specs)} == {
        (ENDPOINTS, "/petrel/")
    }


def test_replicas_plan_two_nameservers_that_all_run_a_controller_and_brokers_it_controls() -> None:
    specs = plan_cluster(UpOptions(replicas=1), "redis://x")

    nameservers = [s for s in specs if s.module == "services.nameserver"]
    assert [(s.name, s.env["PETREL_NAMESERVER_CONTROLLER"]) for s in nameservers] == [
        ("nameserver-0", "true"),
        ("nameserver-1", "true"),
    ]
    brokers = [s for s in specs if s.module == "services.broker"]
    assert [(s.name, s.env["PETREL_BROKER_CONTROLLED"]) for s in brokers] == [
        ("broker-a", "true"),
        ("broker-a@1", "true"),
    ]
    assert not any("PETREL_BROKER_CONTROLLER_ADDRESS" in s.env for s in specs), "no fixed controller address"
    three = plan_cluster(UpOptions(replicas=1, nameservers=3), "redis://x")
    assert len([s for s in three if s.module == "services.nameserver"]) == 3, "--nameservers, when given, counts"


def test_without_replicas_nothing_changes_no_etcd_and_no_etcd_setting() -> None:
    specs = plan_cluster(UpOptions(), "redis://x")

    assert not any(s.command or s.restart for s in specs), "no etcd process"
    assert not any(key.startswith("PETREL_ETCD_") for s in specs for key in s.env)
    assert len([s for s in specs if s.module == "services.nameserver"]) == 1


def test_an_etcd_named_by_its_endpoints_is_used_and_none_is_started() -> None:
    etcd = EtcdSettings(endpoints=["https://10.0.0.5:2379", "10.0.0.6:2379"], prefix="/orders/")

    specs = plan_cluster(UpOptions(replicas=1), "redis://x", etcd)

    assert not any(s.command for s in specs)
    assert {s.env["PETREL_ETCD_ENDPOINTS"] for s in specs} == {"https://10.0.0.5:2379,http://10.0.0.6:2379"}
    assert {s.env["PETREL_ETCD_PREFIX"] for s in specs} == {"/orders/"}


def test_one_member_for_a_demo_and_none_refused() -> None:
    demo = plan_cluster(UpOptions(replicas=1, etcd_members=1, etcd_port=3000), "redis://x")
    assert [(s.name, s.port, s.other_ports) for s in demo if s.command] == [("etcd-1", 3000, (3001,))]
    assert {s.env["PETREL_ETCD_ENDPOINTS"] for s in petrel_processes(demo)} == {"http://127.0.0.1:3000"}
    with pytest.raises(ValueError, match="--etcd-members 0: an etcd needs at least one member"):
        plan_cluster(UpOptions(replicas=1, etcd_members=0), "redis://x")


def test_a_peer_port_in_use_is_named_before_anything_starts(tmp_path: Path) -> None:
    import socket

    first = free_port_run(2)
    specs = plan_cluster(UpOptions(data_dir=tmp_path, replicas=1, etcd_members=1, etcd_port=first), "redis://x")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", first + 1))
        with pytest.raises(StartupFailed, match=f"etcd-1 :{first + 1}"):
            Supervisor(tmp_path).check_ports(specs[:1])


def test_without_etcd_installed_petrel_up_replicas_names_the_package(tmp_path: Path) -> None:
    with pytest.raises(EtcdNotAvailable, match=r"apt-get install -y etcd-server"):
        etcd_server.etcd_binary(path=str(tmp_path))

    refused = petrel("up", "--replicas", "1", "--data-dir", str(tmp_path / "data"), env=petrel_env(PATH=str(tmp_path)))

    assert refused.returncode == 1
    assert "apt-get install -y etcd-server" in refused.stderr
    assert not (tmp_path / "data" / "logs").exists(), "nothing started"


def test_a_restart_that_would_need_a_member_added_is_refused(tmp_path: Path) -> None:
    members = etcd_server.private_members(tmp_path, 3, 2379)
    etcd_server.check_member_data(tmp_path, members)  # the first start: no data, peers recorded
    for member in members[:2]:
        (member.data_dir / "member").mkdir(parents=True)

    with pytest.raises(ValueError, match=r"without data .*member-3.* removed and added again"):
        etcd_server.check_member_data(tmp_path, members)
    (members[2].data_dir / "member").mkdir(parents=True)
    etcd_server.check_member_data(tmp_path, members)  # every member has its data: a restart
    with pytest.raises(ValueError, match="start with --etcd-port 2379"):
        etcd_server.check_member_data(tmp_path, etcd_server.private_members(tmp_path, 3, 4000))
    with pytest.raises(ValueError, match=r"holds the data of 3 etcd members .* --etcd-members is 1"):
        etcd_server.check_member_data(tmp_path, members[:1])


def etcd_key(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def put(url: str, key: str, value: str) -> bool:
    try:
        reply = httpx.post(f"{url}/v3/kv/put", json={"key": etcd_key(key), "value": etcd_key(value)}, timeout=2)
    except httpx.HTTPError:
        return False
    return reply.status_code == 200 and "error" not in reply.json()


def get(url: str, key: str) -> str | None:
    try:
        reply = httpx.post(f"{url}/v3/kv/range", json={"key": etcd_key(key)}, timeout=2).json()
    except httpx.HTTPError:
        return None
    kvs = reply.get("kvs", [])
    return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def private_etcd(data_dir: Path, first_port: int) -> Iterator[tuple[Supervisor, list[ProcessSpec]]]:
    """The etcd members `petrel up --replicas 1` plans, started and watched by its supervisor as `up` does."""
    etcd_binary()
    options = UpOptions(data_dir=data_dir, replicas=1, etcd_port=first_port)
    members = [s for s in plan_cluster(options, "redis://x") if s.restart]
    etcd_server.check_member_data(data_dir, etcd_server.private_members(data_dir, 3, first_port))
    said: list[str] = []
    supervisor = Supervisor(data_dir, say=said.append)
    supervisor.check_ports(members)
    watching = threading.Thread(target=supervisor.watch, kwargs={"poll_seconds": 0.1}, daemon=True)
    try:
        supervisor.start_together(members)
        watching.start()
        yield supervisor, members
    finally:
        supervisor.stopping.set()
        if watching.is_alive():
            watching.join()
        supervisor.stop_all()


def test_the_private_etcd_survives_a_killed_member_which_is_started_again_and_a_restart_keeps_its_keys(
    tmp_path: Path,
) -> None:
    first = free_port_run(6)
    with private_etcd(tmp_path, first) as (supervisor, members):
        urls = [member.url for member in members]
        assert all(healthy(url) for url in urls), "up once every member answers /health"
        assert put(urls[0], "/petrel/before", "1")
        killed = supervisor.children[0].process
        killed.kill()
        killed.wait()

        wait_until(lambda: put(urls[1], "/petrel/after", "2"), "a put on the two members left", 10)
        assert get(urls[2], "/petrel/after") == "2"
        wait_until(lambda: supervisor.children[0].process.pid != killed.pid, "the killed member started again", 10)
        wait_until(lambda: get(urls[0], "/petrel/after") == "2", "the restarted member caught up", 20)

    with private_etcd(tmp_path, first) as (_, members):
        assert [get(member.url, "/petrel/before") for member in members] == ["1", "1", "1"]
