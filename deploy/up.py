"""`petrel up`: the whole cluster on this machine, each service its own process."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from types import FrameType

from deploy.plan import ProcessSpec, UpOptions, plan_cluster
from deploy.redis_server import (
    DEFAULT_REDIS_URL,
    RedisNotAvailable,
    private_redis_command,
    redis_answers,
    redis_refusal,
)
from deploy.supervisor import StartupFailed, Supervisor, port_in_use
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
        options = _with_etl_setting(options)
        url = _redis(supervisor, options, redis_url or os.environ.get("PETREL_REDIS_URL"))
        specs = plan_cluster(options, url)
        supervisor.check_ports(specs)
        for spec in specs:
            print(f"[petrel] starting {spec.name}{f' on {spec.url}' if spec.port else ''} ...", flush=True)
            supervisor.start(spec)
    except (StartupFailed, RedisNotAvailable, ValueError) as exc:
        print(f"[petrel] could not start the cluster: {exc}", file=sys.stderr, flush=True)
        supervisor.stop_all()
        return 1
    _print_urls(specs, options, url)
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
    supervisor.start(ProcessSpec("redis", "", port), command=command, health_path=None)
    return f"redis://127.0.0.1:{port}/0"


def _print_urls(specs: list[ProcessSpec], options: UpOptions, redis_url: str) -> None:
    print("\nPetrel is up.", flush=True)
    for spec in specs:
        where = spec.url if spec.port else f"(Celery {spec.args[0] if spec.args else 'process'}, no port)"
        print(f"  {spec.name:15} {where}", flush=True)
    print(f"  {'redis':15} {masked(redis_url)}")
    print(f"\n  API docs:  http://{options.host}:{options.gateway_port}/docs")
    print(f"  logs:      {options.data_dir / 'logs'}/")
    print(f"  try:       curl -X PUT http://{options.host}:{options.gateway_port}/v1/topics/orders")
    print("\nCtrl-C stops every process.", flush=True)
