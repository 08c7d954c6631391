import os
import signal
import sys
from pathlib import Path

import pytest
from fastapi import FastAPI

from deploy.plan import ProcessSpec, UpOptions, _check_gateway_workers, broker_name, gateway_name, plan_cluster
from deploy.redis_server import RedisNotAvailable, private_redis_command, redis_answers
from deploy.supervisor import StartupFailed, Supervisor
from deploy.up import _auth_line, _gateway_auth, _with_etl_setting, _workers_line, up
from services.etl.settings import EtlSettings
from tests.support.serving import free_port, serving


def test_broker_names_run_a_to_z_then_double_letters() -> None:
    assert [broker_name(i) for i in (0, 1, 25, 26, 27)] == [
        "broker-a",
        "broker-b",
        "broker-z",
        "broker-aa",
        "broker-ab",
    ]


def test_plan_starts_nameservers_first_and_the_gateway_last() -> None:
    specs = plan_cluster(UpOptions(brokers=3, nameservers=2), "redis://127.0.0.1:6379/0")

    assert [s.name for s in specs] == [
        "nameserver-0",
        "nameserver-1",
        "broker-a",
        "broker-b",
        "broker-c",
        "timer",
        "txcheck",
        "txcheck-worker",
        "txcheck-beat",
        "push",
        "etl-worker",
        "etl-beat",
        "gateway",
    ]
    assert [s.port for s in specs if s.module == "services.broker"] == [10911, 10912, 10913]
    assert specs[2].env["PETREL_NAMESERVERS"] == "127.0.0.1:9876,127.0.0.1:9877"
    assert specs[2].env["PETREL_BROKER_BROKER_NAME"] == "broker-a"
    worker, beat = specs[-6], specs[-5]
    assert (worker.module, worker.args, worker.port) == ("services.txcheck", ("worker",), 0)
    assert (beat.module, beat.args, beat.port) == ("services.txcheck", ("beat",), 0)
    assert worker.env["PETREL_REDIS_URL"] == beat.env["PETREL_REDIS_URL"] == "redis://127.0.0.1:6379/0"
    prefix = worker.env["PETREL_TXCHECK_REDIS_KEY_PREFIX"]
    assert prefix == beat.env["PETREL_TXCHECK_REDIS_KEY_PREFIX"] == specs[-7].env["PETREL_TXCHECK_REDIS_KEY_PREFIX"]
    other = plan_cluster(UpOptions(data_dir=Path("elsewhere")), "redis://127.0.0.1:6379/0")
    assert other[-5].env["PETREL_TXCHECK_REDIS_KEY_PREFIX"] != prefix, "two clusters would share Celery queues"


def test_plan_starts_the_nightly_etls_worker_and_beat_on_a_redis_prefix_of_the_clusters_own() -> None:
    specs = {s.name: s for s in plan_cluster(UpOptions(data_dir=Path("here")), "redis://127.0.0.1:6379/0")}
    worker, beat = specs["etl-worker"], specs["etl-beat"]

    assert (worker.module, worker.args, worker.port) == ("services.etl", ("worker",), 0)
    assert (beat.module, beat.args, beat.port) == ("services.etl", ("beat",), 0)
    assert worker.env == beat.env
    assert worker.env["PETREL_REDIS_URL"] == "redis://127.0.0.1:6379/0"
    assert worker.env["PETREL_DATA_DIR"] == "here"
    prefix = worker.env["PETREL_ETL_REDIS_KEY_PREFIX"]
    assert prefix.startswith("petrel:etl:")
    assert prefix == EtlSettings(data_dir=Path("here")).key_prefix, "`python -m services.etl now` would miss the lock"
    assert prefix.removeprefix("petrel:etl:") == specs["txcheck"].env["PETREL_TXCHECK_REDIS_KEY_PREFIX"].removeprefix(
        "petrel:txcheck:"
    )
    other = {s.name: s for s in plan_cluster(UpOptions(data_dir=Path("elsewhere")), "redis://127.0.0.1:6379/0")}
    assert other["etl-worker"].env["PETREL_ETL_REDIS_KEY_PREFIX"] != prefix, "two clusters would share a lock"


def test_no_etl_leaves_the_nightly_etl_out_of_the_plan() -> None:
    names = [s.name for s in plan_cluster(UpOptions(etl=False), "redis://127.0.0.1:6379/0")]
    assert names == ["nameserver", "broker-a", "timer", "txcheck", "txcheck-worker", "txcheck-beat", "push", "gateway"]


def up_options(monkeypatch: pytest.MonkeyPatch, *command_lines: list[str]) -> list[UpOptions]:
    """The options each `petrel up` command line would start a cluster with (none is started)."""
    from deploy.cli import main

    started: list[UpOptions] = []

    def up_here(options: UpOptions, redis_url: str | None) -> int:
        started.append(options)
        return 0

    monkeypatch.setattr("deploy.up.up", up_here)
    for argv in command_lines:
        with pytest.raises(SystemExit):
            main(argv)
    return started


def test_petrel_up_no_etl_and_the_setting_both_leave_the_etl_out(monkeypatch: pytest.MonkeyPatch) -> None:
    started = up_options(monkeypatch, ["up"], ["up", "--no-etl"])
    assert [options.etl for options in started] == [True, False]

    monkeypatch.setenv("PETREL_ETL_NIGHTLY", "false")
    assert _with_etl_setting(UpOptions()).etl is False
    monkeypatch.setenv("PETREL_ETL_NIGHTLY", "true")
    assert _with_etl_setting(UpOptions()).etl is True
    assert _with_etl_setting(UpOptions(etl=False)).etl is False


def test_petrel_up_refuses_a_malformed_nightly_time_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PETREL_ETL_NIGHTLY_AT", "2:30")
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert up(UpOptions(data_dir=tmp_path), "redis://127.0.0.1:6379/0") == 1
    finally:
        for signum, handler in handlers.items():  # up() takes Ctrl-C for the cluster's shutdown
            signal.signal(signum, handler)

    assert "nightly_at '2:30' is not a UTC time HH:MM (00:00 to 23:59)" in capsys.readouterr().err
    assert not (tmp_path / "logs").exists(), "a process was started"


def test_petrel_up_says_whether_callers_need_keys_and_warns_when_open_beyond_loopback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PETREL_AUTH", raising=False)
    assert _gateway_auth(UpOptions()) is False
    assert _auth_line(UpOptions(), False) == [
        "off, the gateway listens on loopback only; PETREL_AUTH=required turns API keys on"
    ]
    assert _gateway_auth(UpOptions(host="0.0.0.0")) is True  # beyond loopback, keys unless told otherwise

    monkeypatch.setenv("PETREL_AUTH", "off")
    with pytest.raises(ValueError, match="petrel up --insecure-no-auth"):
        _gateway_auth(UpOptions(host="0.0.0.0"))
    open_to_all = UpOptions(host="0.0.0.0", insecure_no_auth=True, gateway_port=8081)
    assert capsys.readouterr().err == ""
    assert _gateway_auth(open_to_all) is False
    assert capsys.readouterr().err == (
        "[petrel] WARNING: API keys are off on 0.0.0.0, which other hosts can reach (--insecure-no-auth): anyone "
        "who reaches port 8081 can send, consume and delete\n"
    )
    assert _auth_line(open_to_all, False) == [
        "OFF on 0.0.0.0, which other hosts can reach (--insecure-no-auth): anyone who reaches the gateway can do "
        "anything"
    ]


def test_plan_with_gateway_workers_starts_them_last_on_one_shared_port_each_under_its_own_name() -> None:
    options = UpOptions(gateway_workers=3, gateway_port=8181, host="0.0.0.0", insecure_no_auth=True)
    specs = plan_cluster(options, "redis://127.0.0.1:6379/0")
    workers = specs[-3:]

    assert [gateway_name(i) for i in range(3)] == ["gateway", "gateway-2", "gateway-3"]
    assert [w.name for w in workers] == ["gateway", "gateway-2", "gateway-3"]
    assert all(s.module != "gateway" for s in specs[:-3]), "a gateway worker starts before the services it calls"
    assert {(w.module, w.port, w.host, w.url, w.shares_port) for w in workers} == {
        ("gateway", 8181, "0.0.0.0", "http://0.0.0.0:8181", True)
    }
    assert [w.env["PETREL_GATEWAY_WORKER"] for w in workers] == ["gateway", "gateway-2", "gateway-3"]
    alike = [{k: v for k, v in w.env.items() if k != "PETREL_GATEWAY_WORKER"} for w in workers]
    assert alike[0] == alike[1] == alike[2], "the workers differ in more than their names"
    assert alike[0]["PETREL_GATEWAY_REUSE_PORT"] == "true"
    assert alike[0]["PETREL_GATEWAY_PORT"] == "8181"
    assert alike[0]["PETREL_GATEWAY_INSECURE_NO_AUTH"] == "true"


def test_one_gateway_worker_is_planned_as_before_without_sharing_its_port() -> None:
    (gateway,) = [s for s in plan_cluster(UpOptions(), "redis://x") if s.module == "gateway"]

    assert (gateway.name, gateway.port, gateway.shares_port) == ("gateway", 8080, False)
    assert "PETREL_GATEWAY_REUSE_PORT" not in gateway.env
    assert gateway.env["PETREL_GATEWAY_WORKER"] == "gateway"


def test_gateway_workers_are_refused_below_one_and_beyond_linux() -> None:
    with pytest.raises(ValueError, match="--gateway-workers 0: a cluster needs at least one gateway worker"):
        plan_cluster(UpOptions(gateway_workers=0), "redis://x")
    with pytest.raises(ValueError, match="--gateway-workers 2 needs Linux"):
        _check_gateway_workers(2, platform="darwin")
    _check_gateway_workers(1, platform="darwin")


def test_petrel_up_takes_gateway_workers_and_says_how_many_serve_the_port(monkeypatch: pytest.MonkeyPatch) -> None:
    started = up_options(monkeypatch, ["up"], ["up", "--gateway-workers", "4"])

    assert [options.gateway_workers for options in started] == [1, 4]
    assert _workers_line(started[0]) == "1 worker (petrel up --gateway-workers N: N processes on the one port)"
    assert _workers_line(started[1]) == "4 workers sharing port 8080 (SO_REUSEPORT): the kernel spreads connections"


def test_a_worker_sharing_a_port_is_up_only_when_it_answers_itself() -> None:
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": "gateway", "worker": "gateway"}

    with serving(app) as served:
        first, second = (
            ProcessSpec(name, "gateway", served.port, shares_port=True) for name in ("gateway", "gateway-2")
        )

        assert Supervisor._answers(first, "/healthz")
        assert not Supervisor._answers(second, "/healthz"), "gateway-2 taken as up on gateway's answer"
        assert Supervisor._answers(ProcessSpec("other", "gateway", served.port), "/healthz")


def test_a_port_that_answers_other_than_http_is_not_up() -> None:
    import socket
    import threading

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def echo() -> None:  # what a probe self-connected on a port nobody listens on yet reads: its own request
            connection, _ = listener.accept()
            with connection:
                connection.sendall(connection.recv(4096))

        threading.Thread(target=echo, daemon=True).start()
        assert not Supervisor._answers(ProcessSpec("etcd-1", "", listener.getsockname()[1]), "/health")


def test_a_shared_port_in_use_is_named_once(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        workers = [ProcessSpec(name, "gateway", port, shares_port=True) for name in ("gateway", "gateway-2")]
        with pytest.raises(StartupFailed, match=f"ports already in use: gateway :{port} \\("):
            Supervisor(tmp_path).check_ports(workers)


def test_plan_gives_every_process_the_same_delay_level_table() -> None:
    specs = plan_cluster(UpOptions(brokers=2, delay_levels="1s 1m"), "redis://127.0.0.1:6379/0")
    assert {spec.name: spec.env["PETREL_DELAY_LEVELS"] for spec in specs} == {spec.name: "1s 1m" for spec in specs}


def test_plan_refuses_a_malformed_delay_level_table_before_starting_anything() -> None:
    with pytest.raises(ValueError, match="delay level '1q' is not a number with ms, s, m, h or d"):
        plan_cluster(UpOptions(delay_levels="1s 1q"), "redis://127.0.0.1:6379/0")


def test_a_gateway_bound_beyond_loopback_lets_no_service_call_loopback_urls_unless_networks_are_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PETREL_PUSH_ALLOWED_NETWORKS", raising=False)
    local = {s.name: s.env for s in plan_cluster(UpOptions(), "redis://x")}
    public = {s.name: s.env for s in plan_cluster(UpOptions(host="0.0.0.0"), "redis://x")}
    monkeypatch.setenv("PETREL_PUSH_ALLOWED_NETWORKS", "10.0.0.0/8")
    listed = {s.name: s.env for s in plan_cluster(UpOptions(host="0.0.0.0"), "redis://x")}

    assert "PETREL_PUSH_ALLOWED_NETWORKS" not in local["push"]
    assert public["push"]["PETREL_PUSH_ALLOWED_NETWORKS"] == public["txcheck"]["PETREL_PUSH_ALLOWED_NETWORKS"] == ""
    assert "PETREL_PUSH_ALLOWED_NETWORKS" not in listed["push"]  # the operator's own list reaches every process
    assert local["gateway"]["PETREL_GATEWAY_PUSH_ADDRESS"] == "127.0.0.1:10951"


def test_plan_refuses_an_empty_cluster() -> None:
    with pytest.raises(ValueError, match="at least one nameserver and one broker"):
        plan_cluster(UpOptions(brokers=0), "redis://x")


def test_the_local_redis_answers_and_a_free_port_does_not() -> None:
    assert redis_answers("127.0.0.1", 6379), "the tests expect Redis on 127.0.0.1:6379"
    assert not redis_answers("127.0.0.1", free_port())


def test_no_redis_server_installed_is_a_clear_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RedisNotAvailable, match="no redis-server is installed"):
        private_redis_command(6390, tmp_path)


def test_a_child_that_dies_while_starting_is_reported_with_its_log(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    command = (sys.executable, "-c", "import sys; print('cannot open the store'); sys.exit(3)")
    spec = ProcessSpec("doomed", "", free_port(), command=command)

    with pytest.raises(StartupFailed, match="doomed exited with code 3") as failure:
        supervisor.start(spec)

    assert "cannot open the store" in str(failure.value)
    supervisor.stop_all()


def test_busy_ports_are_named(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(StartupFailed, match=f"gateway :{port}"):
            Supervisor(tmp_path).check_ports([ProcessSpec("gateway", "gateway", port)])


def test_a_child_without_a_port_is_up_once_started_and_its_death_is_reported_not_restarted(tmp_path: Path) -> None:
    said: list[str] = []
    supervisor = Supervisor(tmp_path, say=said.append)
    go = tmp_path / "go"
    os.mkfifo(go)  # the child dies once the test opens it: after the check that it was left running
    script = f"open({str(go)!r}).read(); print('worker lost'); raise SystemExit(9)"
    command = (sys.executable, "-c", script)

    child = supervisor.start(ProcessSpec("txcheck-worker", "", 0, command=command))
    assert child.process.poll() is None, "the supervisor waited for a child that serves nothing"
    go.open("w").close()
    supervisor.watch(poll_seconds=0.05)

    assert said[0].startswith(f"[petrel] txcheck-worker (pid {child.process.pid}) exited with code 9")
    assert "worker lost" in said[0]
    assert said[1:] == ["[petrel] every process has exited; stopping"]
    assert len(supervisor.children) == 1
    supervisor.stop_all()


def test_plan_with_replicas_puts_each_broker_name_under_the_controllers_slaves_on_the_ports_after_the_masters() -> None:
    planned = plan_cluster(UpOptions(brokers=2, replicas=2, nameservers=2), "redis://x")
    specs = [s for s in planned if s.module == "services.broker"]

    assert [(s.name, s.port, s.env["PETREL_BROKER_BROKER_ID"]) for s in specs if "@" in s.name] == [
        ("broker-a@1", 10913, "1"),
        ("broker-a@2", 10914, "2"),
        ("broker-b@1", 10915, "1"),
        ("broker-b@2", 10916, "2"),
    ]
    assert [(s.name, s.port) for s in specs if "@" not in s.name] == [("broker-a", 10911), ("broker-b", 10912)]
    assert {s.env["PETREL_BROKER_ROLE"] for s in specs} == {"SYNC_MASTER"}, "the controller says who is master"
    assert {s.env["PETREL_BROKER_CONTROLLED"] for s in specs} == {"true"}
    assert specs[1].env["PETREL_BROKER_BROKER_NAME"] == "broker-a"
    nameservers = [s for s in planned if s.module == "services.nameserver"]
    assert [s.env.get("PETREL_NAMESERVER_CONTROLLER") for s in nameservers] == ["true", "true"]
    alone = plan_cluster(UpOptions(), "redis://x")
    assert not any("CONTROLL" in key for s in alone for key in s.env), "no replicas, no controller"


def test_async_replication_and_no_replicas_plan_async_masters_and_too_many_brokers_are_refused() -> None:
    async_specs = plan_cluster(UpOptions(replicas=1, async_replication=True), "redis://x")
    assert {s.env["PETREL_BROKER_ROLE"] for s in async_specs if s.name == "broker-a"} == {"ASYNC_MASTER"}
    alone = plan_cluster(UpOptions(), "redis://x")
    assert [s.env["PETREL_BROKER_ROLE"] for s in alone if s.module == "services.broker"] == ["ASYNC_MASTER"]
    with pytest.raises(ValueError, match="reach the timer's port 10931"):
        plan_cluster(UpOptions(brokers=7, replicas=2), "redis://x")


def test_a_colocated_plan_has_one_process_for_the_gateway_and_the_broker_in_the_brokers_place() -> None:
    specs = plan_cluster(UpOptions(colocated=True, gateway_port=8181, broker_port=10921), "redis://x")
    names = [s.name for s in specs]

    assert names[:3] == ["nameserver", "gateway+broker-a", "timer"], names
    assert not {"gateway", "broker-a"} & set(names)
    (colocated,) = [s for s in specs if s.name == "gateway+broker-a"]
    assert (colocated.module, colocated.args) == ("deploy", ("serve", "gateway", "--colocated"))
    assert (colocated.port, colocated.other_ports) == (8181, (10921,))
    assert colocated.env["PETREL_BROKER_PORT"] == "10921"
    assert colocated.env["PETREL_GATEWAY_PORT"] == "8181"
    assert colocated.env["PETREL_BROKER_BROKER_NAME"] == "broker-a"
