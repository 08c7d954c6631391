"""`petrel up`: the whole cluster on this machine, each service its own process."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from types import FrameType

from pydantic import ValidationError
from redis.exceptions import RedisError

from deploy import etcd_server
from deploy.etcd_server import EtcdNotAvailable
from deploy.fresh import forget_redis_keys, wipe_data_dir
from deploy.plan import ProcessSpec, UpOptions, check_colocated, plan_cluster
from deploy.redis_server import (
    DEFAULT_REDIS_URL,
    RedisNotAvailable,
    private_redis_command,
    redis_answers,
    redis_refusal,
)
from deploy.supervisor import StartupFailed, Supervisor, port_in_use
from gateway.settings import GatewaySettings
from libs.cluster_token import ClusterTokenError, ensure_token_file
from libs.etcd.settings import EtcdSettings
from libs.redis_url import masked
from services.etl.settings import EtlSettings


def up(options: UpOptions, redis_url: str | None) -> int:
    """Start the cluster; `redis_url` (else PETREL_REDIS_URL, else one found or started) is the Redis it uses."""
    supervisor = Supervisor(options.data_dir)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        supervisor.stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        check_colocated(options)  # before anything is wiped or started
        if options.fresh:
            wipe_data_dir(options.data_dir)
        options = _with_etl_setting(options)
        auth = _gateway_auth(options)
        etcd = _etcd_settings(options)
        _check_etcd(options, etcd)
        ensure_token_file(options.token_file)
        url = _redis(supervisor, options, redis_url or os.environ.get("PETREL_REDIS_URL"))
        if options.fresh:
            forget_redis_keys(options.data_dir, url)
        specs = plan_cluster(options, url, etcd)
        members = [spec for spec in specs if spec.restart]
        supervisor.check_ports(specs)
        if members:
            print(f"[petrel] starting etcd: {', '.join(spec.url for spec in members)} ...", flush=True)
            supervisor.start_together(members)
        for spec in specs:
            if not spec.restart:
                print(f"[petrel] starting {spec.name}{f' on {spec.url}' if spec.port else ''} ...", flush=True)
                supervisor.start(spec)
    except (StartupFailed, RedisNotAvailable, EtcdNotAvailable, ValueError, ClusterTokenError, RedisError) as exc:
        print(f"[petrel] could not start the cluster: {exc}", file=sys.stderr, flush=True)
        supervisor.stop_all()
        return 1
    _print_urls(specs, options, url, auth, etcd)
    supervisor.watch()
    print("[petrel] stopping ...", flush=True)
    supervisor.stop_all()
    print("[petrel] stopped", flush=True)
    return 0


def _with_etl_setting(options: UpOptions) -> UpOptions:
    """PETREL_ETL_NIGHTLY=false leaves the nightly ETL out, as --no-etl does; its settings (PETREL_ETL_*, which
    every child gets) are refused here, before any process starts, rather than by its worker and beat."""
    if not options.etl:
        return options
    return options if EtlSettings().nightly else dataclasses.replace(options, etl=False)


def _etcd_settings(options: UpOptions) -> EtcdSettings | None:
    """With replicas, the PETREL_ETCD_* settings every process will read (a bad one refused here, before anything
    starts); None without replicas: no etcd."""
    if not options.replicas:
        return None
    try:
        return EtcdSettings()
    except ValidationError as exc:
        errors = "; ".join(f"PETREL_ETCD_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
        raise ValueError(errors or str(exc)) from exc


def _check_etcd(options: UpOptions, etcd: EtcdSettings | None) -> None:
    """A private etcd needs `etcd` installed and its members' data as they were left (deploy.etcd_server); an
    etcd named by PETREL_ETCD_ENDPOINTS must answer. Both are refused before any process starts."""
    if etcd is None:
        return
    if not etcd.endpoints:
        etcd_server.etcd_binary()
        members = etcd_server.private_members(options.data_dir, options.etcd_members, options.etcd_port)
        etcd_server.check_member_data(options.data_dir, members)
    elif refusal := etcd_server.etcd_refusal(etcd):
        raise EtcdNotAvailable(refusal)


def _redis(supervisor: Supervisor, options: UpOptions, configured: str | None) -> str:
    if configured:
        if refusal := redis_refusal(configured):
            raise RedisNotAvailable(refusal)
        return configured
    if redis_answers("127.0.0.1", 6379):
        if refusal := redis_refusal(DEFAULT_REDIS_URL):
            raise RedisNotAvailable(f"{refusal}; set PETREL_REDIS_URL=redis://:<password>@127.0.0.1:6379/0")
        return DEFAULT_REDIS_URL
    port = 6390
    while port_in_use("127.0.0.1", port):
        port += 1
    command = private_redis_command(port, options.data_dir / "redis")
    print(f"[petrel] no Redis on 127.0.0.1:6379; starting a private redis-server on :{port}", flush=True)
    supervisor.start(ProcessSpec("redis", "", port, command=tuple(command), health_path=None))
    return f"redis://127.0.0.1:{port}/0"


FIRST_KEY_GRANTS = "--allow admin --allow pub --allow sub"
"""The first key `petrel up` suggests: administer, publish and subscribe everything (admin alone does not send)."""


def _gateway_auth(options: UpOptions) -> bool:
    """Whether the gateway will ask callers for API keys (GatewaySettings.auth_required, with PETREL_AUTH from the
    environment); auth off on an address other hosts reach without `--insecure-no-auth` is refused here, before any
    process starts, rather than by the gateway, the last to start."""
    settings = _gateway_settings(options)
    required = settings.auth_required()
    others = settings.reached_by_others()
    if not required and others:
        print(
            f"[petrel] WARNING: API keys are off {others} (--insecure-no-auth): anyone who reaches "
            f"port {options.gateway_port} can send, consume and delete",
            file=sys.stderr,
            flush=True,
        )
    return required


def _gateway_settings(options: UpOptions) -> GatewaySettings:
    """The gateway's settings as far as auth goes: the options, and the environment (PETREL_AUTH, names)."""
    return GatewaySettings(host=options.host, insecure_no_auth=options.insecure_no_auth)


def _auth_line(options: UpOptions, required: bool) -> list[str]:
    """What the gateway asks of callers, and, with keys on, the command that makes a first key."""
    if required:
        return [
            "API keys required (Authorization: Bearer <key>); a first key, for everything:",
            f"KEY=$(petrel keys --data-dir {options.data_dir} create --name admin {FIRST_KEY_GRANTS})",
        ]
    if others := _gateway_settings(options).reached_by_others():
        return [f"OFF {others} (--insecure-no-auth): anyone who reaches the gateway can do anything"]
    return ["off, the gateway listens on loopback only; PETREL_AUTH=required turns API keys on"]


def _workers_line(options: UpOptions) -> str:
    """How many gateway processes serve the port, and how to have more or fewer."""
    workers = options.gateway_workers
    if options.colocated:
        return "in one process with the broker (--colocated): its calls to the broker are in-process calls"
    if workers == 1:
        return "1 worker (petrel up --gateway-workers N: N processes on the one port)"
    return f"{workers} workers sharing port {options.gateway_port} (SO_REUSEPORT): the kernel spreads connections"


def _etcd_line(options: UpOptions, etcd: EtcdSettings | None) -> list[str]:
    """Which etcd the controllers keep their state in, and the promise a single member gives up."""
    if etcd is None:
        return []
    if etcd.endpoints:
        return [f"  etcd:      {', '.join(etcd.endpoints)} (PETREL_ETCD_ENDPOINTS), keys under {etcd.prefix}"]
    count = options.etcd_members
    line = f"  etcd:      {count} member{'s' if count > 1 else ''} started here, keys under {etcd.prefix}"
    if count == 1:
        line += " (one member: its loss stops every failover; the default 3 survive the loss of any one)"
    return [line]


def _print_urls(
    specs: list[ProcessSpec], options: UpOptions, redis_url: str, auth: bool, etcd: EtcdSettings | None = None
) -> None:
    """The banner, in one write: a reader that sees "Petrel is up." sees the whole of it (tests wait on that line)."""
    lines = ["", "Petrel is up."]
    for spec in specs:
        where = spec.url if spec.port else f"(Celery {spec.args[0] if spec.args else 'process'}, no port)"
        if spec.other_ports and not spec.restart:  # colocated: the broker's port too
            where += "".join(f" and http://127.0.0.1:{port}" for port in spec.other_ports)
        lines.append(f"  {spec.name:15} {where}")
    lines.append(f"  {'redis':15} {masked(redis_url)}")
    first, *more = _auth_line(options, auth)
    lines += ["", f"  auth:      {first}", *(f"             {line}" for line in more)]
    gateway = f"http://{options.host}:{options.gateway_port}"
    bearer = '-H "Authorization: Bearer $KEY" ' if auth else ""
    lines += _etcd_line(options, etcd)
    lines += [
        f"  gateway:   {_workers_line(options)}",
        f"  API docs:  {gateway}/docs",
        f"  logs:      {options.data_dir / 'logs'}/",
        f"  token:     {options.token_file} (internal calls carry it in x-petrel-internal-token)",
        f"  try:       curl {bearer}-X PUT {gateway}/v1/topics/orders",
        "             (a PUT creates the topic, or changes only the fields its body names)",
        "",
        "Ctrl-C stops every process.",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
