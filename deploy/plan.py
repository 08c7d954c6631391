"""ClusterPlan: which processes `petrel up` starts, on which ports, with which settings.

Each child is `python -m <module>` configured only through `PETREL_*`
environment variables, exactly as one would run it by hand or in a container.
The cluster-wide settings (data dir, nameservers, Redis, the delay-level table,
the cluster token's file) go to every process alike: the token file's path, never
the token (libs.cluster_token). With `--replicas`, the etcd that holds the controller's state
comes first (a private one's members, deploy.etcd_server, unless PETREL_ETCD_ENDPOINTS names
one), and every process gets PETREL_ETCD_ENDPOINTS and PETREL_ETCD_PREFIX. With `--colocated`,
the gateway and the one broker are one process, `petrel serve gateway --colocated`
(deploy.colocated), started where the broker would be, with both services' settings.
"""

from __future__ import annotations

import os
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path

from deploy import etcd_server
from libs.cluster_token import TOKEN_FILE_SETTING, token_file_of
from libs.delay import DEFAULT_DELAY_LEVELS, parse_delay_levels
from libs.etcd.settings import EtcdSettings
from libs.settings import cluster_key_prefix


@dataclass(frozen=True, slots=True)
class UpOptions:
    data_dir: Path = Path("data")
    brokers: int = 1
    replicas: int = 0
    """slaves per broker name (`--replicas`), on the ports after the masters'"""
    async_replication: bool = False
    """`--async-replication`: masters with slaves are ASYNC_MASTER (else SYNC_MASTER)"""
    nameservers: int | None = None
    """`--nameservers`; not given: 1, or 2 with replicas (the promise is about the loss of any one process)"""
    etcd_members: int = etcd_server.DEFAULT_MEMBERS
    """with replicas: the private etcd's members (`--etcd-members`; 1, a demo, gives up the promise above)"""
    etcd_port: int = etcd_server.DEFAULT_PORT
    """the first etcd member's client port (`--etcd-port`); its peer port is the next, the next member's after"""
    host: str = "127.0.0.1"
    gateway_port: int = 8080
    gateway_workers: int = 1
    """gateway processes on `gateway_port` (`--gateway-workers`): more than one share it with SO_REUSEPORT"""
    nameserver_port: int = 9876
    broker_port: int = 10911
    timer_port: int = 10931
    txcheck_port: int = 10941
    push_port: int = 10951
    startup_timeout: float = 60.0
    delay_levels: str = DEFAULT_DELAY_LEVELS
    """PETREL_DELAY_LEVELS of every process: the gateway, the brokers and the timer must agree on it."""
    etl: bool = True
    """the nightly ETL's Celery worker and beat (`--no-etl`, PETREL_ETL_NIGHTLY=false: left out)"""
    insecure_no_auth: bool = False
    """`--insecure-no-auth`: let the gateway run without API keys on an address other hosts reach"""
    fresh: bool = False
    """`--fresh`: wipe the data directory (and the cluster's Redis keys) first, after a line saying so"""
    colocated: bool = False
    """`--colocated`: the gateway and the one broker in one process (deploy.colocated)"""

    @property
    def nameserver_count(self) -> int:
        if self.nameservers is not None:
            return self.nameservers
        return 2 if self.replicas else 1

    @property
    def token_file(self) -> Path:
        """The cluster token's file, `<data_dir>/cluster.token`: `up` creates it once, every process reads it."""
        return token_file_of(self.data_dir)


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    name: str
    module: str
    port: int
    """0 for a process that serves nothing (a Celery worker or beat): it is up once started"""
    env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    args: tuple[str, ...] = ()
    """after `python -m <module>`"""
    shares_port: bool = False
    """one of several processes on `port` (the gateway's workers): up when /healthz answers with its own name"""
    command: tuple[str, ...] = ()
    """a program other than Petrel's (an etcd member): run instead of `python -m <module>`"""
    health_path: str | None = "/healthz"
    """what answers 200 once the process is up (None: it accepts connections on `port`)"""
    other_ports: tuple[int, ...] = ()
    """ports it listens on besides `port` (an etcd member's peer port): checked free before anything starts"""
    restart: bool = False
    """started again when it exits (an etcd member, on its data: the others serve meanwhile)"""
    dropped_env_prefix: str = ""
    """variables of the supervisor's environment with this prefix are not passed on (ETCD_* to etcd)"""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}" if self.port else "(no port)"


def broker_name(index: int) -> str:
    """broker-a, broker-b, ..., broker-z, broker-aa, ..."""
    letters = string.ascii_lowercase
    suffix = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        suffix = letters[rest] + suffix
    return f"broker-{suffix}"


def gateway_name(index: int) -> str:
    """gateway, gateway-2, gateway-3, ...: the first worker keeps the name a cluster of one gateway has."""
    return "gateway" if index == 0 else f"gateway-{index + 1}"


def plan_cluster(options: UpOptions, redis_url: str, etcd: EtcdSettings | None = None) -> list[ProcessSpec]:
    """In start order: with replicas, the private etcd's members (`etcd`: where it is and the key prefix; with
    endpoints, an etcd to use and none is started), nameservers, brokers, timer, txcheck (health, Celery worker,
    beat), push, the nightly ETL's Celery worker and beat (unless `options.etl` is false), the gateway's
    workers."""
    count = options.nameserver_count
    if options.brokers < 1 or count < 1:
        raise ValueError("a cluster needs at least one nameserver and one broker")
    check_colocated(options)
    if options.replicas < 0:
        raise ValueError("--replicas must be 0 or more")
    _check_gateway_workers(options.gateway_workers)
    parse_delay_levels(options.delay_levels)  # refused here, before any process starts, rather than by each
    nameservers = [f"127.0.0.1:{options.nameserver_port + i}" for i in range(count)]
    etcd_specs, etcd_env = _etcd(options, etcd or EtcdSettings()) if options.replicas else ([], {})
    shared = (
        {
            "PETREL_DATA_DIR": str(options.data_dir),
            "PETREL_NAMESERVERS": ",".join(nameservers),
            "PETREL_REDIS_URL": redis_url,
            "PETREL_DELAY_LEVELS": options.delay_levels,
            TOKEN_FILE_SETTING: str(options.token_file),
        }
        | _egress(options.host)
        | etcd_env
    )
    specs = etcd_specs + [
        ProcessSpec(
            f"nameserver-{i}" if count > 1 else "nameserver",
            "services.nameserver",
            options.nameserver_port + i,
            shared
            | {"PETREL_NAMESERVER_PORT": str(options.nameserver_port + i)}
            | ({"PETREL_NAMESERVER_CONTROLLER": "true"} if options.replicas else {}),
        )
        for i in range(count)
    ]
    brokers = _brokers(options, shared | ({"PETREL_BROKER_CONTROLLED": "true"} if options.replicas else {}))
    specs += [_colocated(options, brokers[0], shared)] if options.colocated else brokers
    specs.append(
        ProcessSpec("timer", "services.timer", options.timer_port, shared | _port("TIMER", options.timer_port))
    )
    txcheck_env = (
        shared
        | _port("TXCHECK", options.txcheck_port)
        | {"PETREL_TXCHECK_REDIS_KEY_PREFIX": _prefix(options, "txcheck")}
    )
    specs.append(ProcessSpec("txcheck", "services.txcheck", options.txcheck_port, txcheck_env))
    specs.append(ProcessSpec("txcheck-worker", "services.txcheck", 0, txcheck_env, args=("worker",)))
    specs.append(ProcessSpec("txcheck-beat", "services.txcheck", 0, txcheck_env, args=("beat",)))
    specs.append(ProcessSpec("push", "services.push", options.push_port, shared | _port("PUSH", options.push_port)))
    if options.etl:
        etl_env = shared | {"PETREL_ETL_REDIS_KEY_PREFIX": _prefix(options, "etl")}
        specs.append(ProcessSpec("etl-worker", "services.etl", 0, etl_env, args=("worker",)))
        specs.append(ProcessSpec("etl-beat", "services.etl", 0, etl_env, args=("beat",)))
    return specs if options.colocated else specs + _gateways(options, shared)


def check_colocated(options: UpOptions) -> None:
    """`--colocated` with an option that needs separate processes is refused (ValueError naming the option)."""
    if not options.colocated:
        return
    conflicts = [
        (options.brokers > 1, f"--brokers {options.brokers}", "runs one broker"),
        (options.replicas > 0, f"--replicas {options.replicas}", "runs one broker without slaves"),
        (options.gateway_workers > 1, f"--gateway-workers {options.gateway_workers}", "runs one gateway process"),
    ]
    for conflict, option, promise in conflicts:
        if conflict:
            raise ValueError(f"--colocated {promise}: {option} needs separate processes (leave out --colocated)")


def _colocated(options: UpOptions, broker: ProcessSpec, shared: dict[str, str]) -> ProcessSpec:
    """The gateway and the broker in one process, on the gateway's port and the broker's."""
    (gateway,) = _gateways(options, shared)
    return ProcessSpec(
        f"gateway+{broker.name}",
        "deploy",
        gateway.port,
        broker.env | gateway.env,
        host=options.host,
        args=("serve", "gateway", "--colocated"),
        other_ports=(broker.port,),
    )


def _etcd(options: UpOptions, etcd: EtcdSettings) -> tuple[list[ProcessSpec], dict[str, str]]:
    """The private etcd's members (none when `etcd` names endpoints), and the variables that tell every process
    where it is and under which prefix this cluster's keys are."""
    if etcd.endpoints:
        return [], {"PETREL_ETCD_ENDPOINTS": ",".join(etcd.endpoints), "PETREL_ETCD_PREFIX": etcd.prefix}
    members = etcd_server.private_members(options.data_dir, options.etcd_members, options.etcd_port)
    token = etcd_server.private_token(options.data_dir)
    specs = [
        ProcessSpec(
            f"etcd-{i + 1}",
            "",
            options.etcd_port + 2 * i,
            command=tuple(etcd_server.member_command(member, members, token)),
            health_path="/health",
            other_ports=(options.etcd_port + 2 * i + 1,),
            restart=True,
            dropped_env_prefix=etcd_server.ENV_PREFIX,
        )
        for i, member in enumerate(members)
    ]
    endpoints = ",".join(member.client_url for member in members)
    return specs, {"PETREL_ETCD_ENDPOINTS": endpoints, "PETREL_ETCD_PREFIX": etcd.prefix}


def _brokers(options: UpOptions, shared: dict[str, str]) -> list[ProcessSpec]:
    """Each broker name's master (the first keeps `broker_port`), then its `replicas` slaves on the ports after
    every master's. With slaves, the nameservers' controller (whichever leads, through etcd) decides which is
    master (broker id 0 at first; the most caught-up in-sync slave when the master fails), SYNC_MASTER unless
    `async_replication`."""
    count = options.brokers * (1 + options.replicas)
    if options.broker_port < options.timer_port < options.broker_port + count:
        raise ValueError(f"{count} brokers from port {options.broker_port} reach the timer's port {options.timer_port}")
    role = "ASYNC_MASTER" if options.replicas == 0 or options.async_replication else "SYNC_MASTER"
    specs = []
    for i in range(options.brokers):
        port = options.broker_port + i
        env = shared | {"PETREL_BROKER_PORT": str(port), "PETREL_BROKER_BROKER_NAME": broker_name(i)}
        specs.append(ProcessSpec(broker_name(i), "services.broker", port, env | {"PETREL_BROKER_ROLE": role}))
        for j in range(1, options.replicas + 1):
            slave_port = options.broker_port + options.brokers + i * options.replicas + j - 1
            slave = {
                "PETREL_BROKER_PORT": str(slave_port),
                "PETREL_BROKER_BROKER_ID": str(j),
                "PETREL_BROKER_ROLE": role,
            }
            specs.append(ProcessSpec(f"{broker_name(i)}@{j}", "services.broker", slave_port, env | slave))
    return specs


def _gateways(options: UpOptions, shared: dict[str, str]) -> list[ProcessSpec]:
    """The gateway's workers, alike but for their names; several share the port (SO_REUSEPORT)."""
    several = options.gateway_workers > 1
    env = (
        shared
        | _port("GATEWAY", options.gateway_port)
        | {
            "PETREL_GATEWAY_HOST": options.host,
            "PETREL_GATEWAY_TIMER_ADDRESS": f"127.0.0.1:{options.timer_port}",
            "PETREL_GATEWAY_PUSH_ADDRESS": f"127.0.0.1:{options.push_port}",
        }
        | ({"PETREL_GATEWAY_INSECURE_NO_AUTH": "true"} if options.insecure_no_auth else {})
        | ({"PETREL_GATEWAY_REUSE_PORT": "true"} if several else {})
    )
    names = [gateway_name(i) for i in range(options.gateway_workers)]
    return [
        ProcessSpec(
            name,
            "gateway",
            options.gateway_port,
            env | {"PETREL_GATEWAY_WORKER": name},
            host=options.host,
            shares_port=several,
        )
        for name in names
    ]


def _check_gateway_workers(workers: int, platform: str = sys.platform) -> None:
    if workers < 1:
        raise ValueError(f"--gateway-workers {workers}: a cluster needs at least one gateway worker")
    if workers > 1 and not platform.startswith("linux"):
        raise ValueError(
            f"--gateway-workers {workers} needs Linux: only its SO_REUSEPORT spreads connections over the processes "
            "sharing a port"
        )


def _egress(host: str) -> dict[str, str]:
    """A gateway reachable from elsewhere (`--host 0.0.0.0`): txcheck and push, which listen on loopback
    themselves, must not allow loopback URLs either, unless the operator lists networks (libs.egress)."""
    if host in {"127.0.0.1", "localhost", "::1"} or os.environ.get("PETREL_PUSH_ALLOWED_NETWORKS") is not None:
        return {}
    return {"PETREL_PUSH_ALLOWED_NETWORKS": ""}


def _port(service: str, port: int) -> dict[str, str]:
    return {f"PETREL_{service}_PORT": str(port)}


def _prefix(options: UpOptions, service: str) -> str:
    """txcheck's and the ETL's Redis keys and Celery queues, apart from those of other clusters sharing the Redis."""
    return cluster_key_prefix(service, options.data_dir)
