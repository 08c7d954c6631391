"""The `petrel` command: `up`, `serve`, `keys`, `openapi`, `settings-reference`, `bench`, `store check|dump|repair`,
`checkback-receiver`, `webhook-receiver`, `etl daily`, `etl report`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from deploy import keys
from deploy.admin import commands as admin_commands
from deploy.plan import UpOptions
from deploy.serve import SERVICES


def _receiver_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The example receivers: of transaction check-backs, of push deliveries."""
    r = sub.add_parser("checkback-receiver", help="an example transaction check-back receiver (prints and answers)")
    r.add_argument("--port", type=int, default=9000)
    given = r.add_mutually_exclusive_group()
    given.add_argument(
        "--secret", help="the producer group's signing_secret (whsec_...); ps shows it: prefer the file or variable"
    )
    given.add_argument(
        "--secret-file", type=Path, help="a file holding the signing_secret (default: $PETREL_CHECKBACK_SECRET)"
    )
    r.add_argument("--answer", choices=["COMMIT", "ROLLBACK", "UNKNOWN"], default="COMMIT", help="the default answer")
    r.add_argument("--decisions", type=Path, help="a file of '<message_id> COMMIT|ROLLBACK' lines, read per check")
    w = sub.add_parser("webhook-receiver", help="an example push endpoint: verifies, prints and answers each delivery")
    w.add_argument("--port", type=int, default=9000, help="(default: 9000; 0: any free port, printed)")
    w.add_argument("--host", default="127.0.0.1")
    w.add_argument(
        "--secret",
        action="append",
        help="the subscription's signing_secret (whsec_...); repeat to accept any of several; ps shows it: "
        "prefer --secret-file or $PETREL_WEBHOOK_SECRET",
    )
    w.add_argument(
        "--secret-file",
        type=Path,
        action="append",
        help="a file of signing secrets, one a line (default: $PETREL_WEBHOOK_SECRET)",
    )
    answer = w.add_mutually_exclusive_group()
    answer.add_argument("--answer", type=int, default=200, metavar="STATUS", help="the status to answer (default: 200)")
    answer.add_argument(
        "--defer", action="store_true", help="answer 202 Petrel-Ack: deferred, ack later via the gateway"
    )
    w.add_argument("--retry-after", type=int, metavar="SECONDS", help="send Retry-After (with --answer 429 or 503)")
    w.add_argument("--gateway", default="http://127.0.0.1:8080", help="where --defer acks (default: %(default)s)")
    w.add_argument("--defer-seconds", type=float, default=1.0, help="how long after a --defer delivery to ack (1)")


def _webhook_receiver(args: argparse.Namespace) -> None:
    from deploy.webhook_receiver import ReceiverOptions, run

    secrets = receiver_secrets(args.secret, args.secret_file, "PETREL_WEBHOOK_SECRET")
    defer_seconds = args.defer_seconds if args.defer else None
    run(args.host, args.port, ReceiverOptions(secrets, args.answer, args.retry_after, defer_seconds, args.gateway))


def _run_receiver(args: argparse.Namespace) -> None:
    if args.command == "webhook-receiver":
        _webhook_receiver(args)
        return
    _checkback_receiver(args)


def _checkback_receiver(args: argparse.Namespace) -> None:
    from deploy.checkback_receiver import run

    given = [args.secret] if args.secret is not None else None
    secrets = receiver_secrets(given, [args.secret_file] if args.secret_file else None, "PETREL_CHECKBACK_SECRET")
    if not secrets:
        raise SystemExit(
            "petrel checkback-receiver: --secret-file FILE (or PETREL_CHECKBACK_SECRET): the producer group's "
            "signing_secret"
        )
    run(args.port, secrets[0], args.answer, args.decisions)


def receiver_secrets(given: list[str] | None, files: list[Path] | None, variable: str) -> list[str]:
    """An example receiver's secrets: those given and the lines of the files given, else the variable's."""
    found = list(given or [])
    for path in files or []:
        try:
            found += [line.strip() for line in path.read_text().splitlines() if line.strip()]
        except OSError as exc:
            raise SystemExit(f"--secret-file {path}: {exc.strerror}") from exc
    if not found and os.environ.get(variable):
        found.append(os.environ[variable])
    return found


def _up_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = UpOptions()
    p = sub.add_parser("up", help="start the whole cluster on this machine (Ctrl-C stops it)")
    p.add_argument("--data-dir", type=Path, default=d.data_dir, help="data, logs and run state (default: ./data)")
    p.add_argument("--brokers", type=int, default=d.brokers, help="how many brokers (default: 1)")
    p.add_argument(
        "--replicas",
        type=int,
        default=d.replicas,
        metavar="R",
        help="slaves per broker, each copying its master's CommitLog (default: 0); the masters are SYNC_MASTER",
    )
    p.add_argument(
        "--async-replication",
        action="store_true",
        help="with --replicas: ASYNC_MASTER, a send is answered before its slaves have it",
    )
    p.add_argument(
        "--nameservers",
        type=int,
        default=d.nameservers,
        help="how many nameservers (default: 1; with --replicas 2, each running a controller)",
    )
    p.add_argument(
        "--etcd-members",
        type=int,
        default=d.etcd_members,
        metavar="N",
        help="with --replicas: the members of the private etcd holding the controllers' state (default: 3, which "
        "survive the loss of any one; 1 is a demo whose loss stops failover); none when PETREL_ETCD_ENDPOINTS "
        "names an etcd",
    )
    p.add_argument(
        "--etcd-port",
        type=int,
        default=d.etcd_port,
        help="the first etcd member's client port; its peer port is the next, the next member's after (default: 2379)",
    )
    p.add_argument("--host", default=d.host, help="the gateway's bind address (default: 127.0.0.1)")
    p.add_argument("--gateway-port", type=int, default=d.gateway_port, help="(default: %(default)s)")
    p.add_argument(
        "--gateway-workers",
        type=int,
        default=d.gateway_workers,
        metavar="N",
        help="gateway processes sharing --gateway-port (SO_REUSEPORT, Linux), for machines with more cores; "
        "named gateway, gateway-2, ... (default: 1)",
    )
    p.add_argument(
        "--nameserver-port",
        type=int,
        default=d.nameserver_port,
        help="the first nameserver's port (default: %(default)s)",
    )
    p.add_argument(
        "--broker-port",
        type=int,
        default=d.broker_port,
        help="the first broker's port, +1 per broker (default: %(default)s)",
    )
    p.add_argument("--timer-port", type=int, default=d.timer_port, help="(default: %(default)s)")
    p.add_argument("--txcheck-port", type=int, default=d.txcheck_port, help="(default: %(default)s)")
    p.add_argument("--push-port", type=int, default=d.push_port, help="(default: %(default)s)")
    p.add_argument(
        "--redis-url",
        default=None,
        help="use this Redis instead of finding or starting one (default: $PETREL_REDIS_URL; a URL with a password "
        "belongs there, not on a command line that ps shows)",
    )
    p.add_argument(
        "--delay-levels",
        default=os.environ.get("PETREL_DELAY_LEVELS", d.delay_levels),
        help="the delay-level table every process gets as PETREL_DELAY_LEVELS (default: that variable, "
        f"else '{d.delay_levels}')",
    )
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="with PETREL_AUTH=off and --host other than loopback: run the gateway open to anyone who reaches it",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="start it in the background and return once it is up (for scripts; output in <data-dir>/logs/up.log)",
    )
    p.add_argument("--wait-timeout", type=float, default=180.0, help="with --wait: give up after this long (s)")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start over: delete --data-dir (every topic, message, key and log) and the cluster's Redis keys first",
    )
    p.add_argument(
        "--colocated",
        action="store_true",
        help="run the gateway and the broker in one process, the hop between them an in-process call (a single "
        "machine with one broker: not with --brokers over 1, --replicas or --gateway-workers over 1)",
    )
    p.add_argument(
        "--no-etl",
        dest="etl",
        action="store_false",
        help="leave out the nightly ETL's Celery worker and beat (so does PETREL_ETL_NIGHTLY=false)",
    )


def _serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run one service in the foreground, settings from the environment (a host or systemd unit of its own)",
    )
    p.add_argument("service", metavar="SERVICE", choices=SERVICES, help=f"one of: {', '.join(SERVICES)}")
    p.add_argument(
        "--env-file",
        type=Path,
        metavar="PATH",
        help="KEY=VALUE lines put in the environment first (a variable already set wins)",
    )
    p.add_argument(
        "--colocated",
        action="store_true",
        help="gateway only: run its one broker in this process too (PETREL_BROKER_* settings), the hop between "
        "them an in-process call; not with replicas or several gateway processes",
    )


def _store_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("store", help="check, dump (read-only) or repair a broker's store directory")
    tools = s.add_subparsers(dest="tool", required=True)
    c = tools.add_parser("check", help="verify every record and ConsumeQueue unit; exit 1 on any error")
    c.add_argument("dir", type=Path, help="the store directory, e.g. data/brokers/broker-a")
    c.add_argument("--max-problems", type=int, default=20, help="stop after this many problems (0: never)")
    r = tools.add_parser(
        "repair",
        help="with the broker stopped: quarantine damaged CommitLog records, keeping every record after them",
    )
    r.add_argument("dir", type=Path, help="the store directory, e.g. data/brokers/broker-a")
    d = tools.add_parser("dump", help="print the records in CommitLog order, or a ConsumeQueue's units")
    d.add_argument("dir", type=Path, help="the store directory, e.g. data/brokers/broker-a")
    d.add_argument("--topic", help="only this topic's records")
    d.add_argument("--queue", type=int, help="only this queue id's records")
    d.add_argument(
        "--from",
        dest="start",
        metavar="OFFSET",
        type=int,
        default=0,
        help="from this CommitLog offset (queue offset with --consumequeue)",
    )
    d.add_argument("--limit", type=int, help="at most this many lines")
    d.add_argument("--json", action="store_true", help="one JSON object per line, with the whole body")
    d.add_argument("--consumequeue", nargs=2, metavar=("TOPIC", "QUEUE"), help="print this queue's units instead")


def _etl_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from services.etl.arguments import add_daily_arguments, add_report_arguments

    e = sub.add_parser("etl", help="the nightly Spark ETL over the exported events (pyspark: the etl extra)")
    jobs = e.add_subparsers(dest="job", required=True)
    add_daily_arguments(jobs.add_parser("daily", help="compute one UTC day's tables from the lifecycle events"))
    add_report_arguments(jobs.add_parser("report", help="draw a day's HTML report again from its written tables"))


def _store(args: argparse.Namespace) -> int:
    from libs.errors import CorruptRecord
    from libs.store.tools import dump
    from libs.store.tools.check import check_store
    from libs.store.tools.shared import StoreToolError

    try:
        if args.tool == "check":
            report = check_store(args.dir, max_problems=args.max_problems)
            print("\n".join([*report.summary_lines(), *(p.line() for p in report.problems)]))
            return 0 if report.ok else 1
        if args.tool == "repair":
            return _repair(args.dir)
        if args.consumequeue:
            topic, queue = args.consumequeue
            if not queue.isdigit():
                raise StoreToolError(f"queue id {queue!r} is not a number")
            for unit in dump.units(args.dir, topic, int(queue), start=args.start, limit=args.limit):
                print(dump.unit_json(unit) if args.json else dump.unit_line(unit))
            return 0
        for stored in dump.records(args.dir, topic=args.topic, queue_id=args.queue, start=args.start, limit=args.limit):
            print(dump.record_json(stored) if args.json else dump.record_line(stored))
    except (StoreToolError, CorruptRecord) as exc:
        print(f"petrel store {args.tool}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `petrel store dump ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _repair(directory: Path) -> int:
    from libs.store.tools.repair import repair_store

    quarantined = repair_store(directory)
    for item in quarantined:
        print(item.line())
    print(
        f"repaired {directory}: {len(quarantined)} damaged region(s) quarantined"
        if quarantined
        else "nothing to repair"
    )
    return 0


def _openapi(directory: Path, check: bool) -> None:
    from deploy.openapi import stale_specs, write_specs

    if check:
        stale = stale_specs(directory)
        if stale:
            sys.exit(f"stale OpenAPI specs in {directory}: {', '.join(stale)}; run `make openapi`")
        print("OpenAPI specs are up to date")
        return
    written = write_specs(directory)
    print(f"wrote {', '.join(written)}" if written else "OpenAPI specs are up to date")


def _up(args: argparse.Namespace, argv: list[str]) -> int:
    if args.wait:
        from deploy.up_wait import up_and_wait

        return up_and_wait(argv, Path(args.data_dir), args.wait_timeout)
    from deploy.up import up

    options = UpOptions(
        data_dir=args.data_dir,
        brokers=args.brokers,
        replicas=args.replicas,
        async_replication=args.async_replication,
        nameservers=args.nameservers,
        etcd_members=args.etcd_members,
        etcd_port=args.etcd_port,
        host=args.host,
        gateway_port=args.gateway_port,
        gateway_workers=args.gateway_workers,
        nameserver_port=args.nameserver_port,
        broker_port=args.broker_port,
        timer_port=args.timer_port,
        txcheck_port=args.txcheck_port,
        push_port=args.push_port,
        delay_levels=args.delay_levels,
        etl=args.etl,
        insecure_no_auth=args.insecure_no_auth,
        fresh=args.fresh,
        colocated=args.colocated,
    )
    return up(options, args.redis_url)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # the harness parses its own arguments (and answers its own --help)
        from bench.__main__ import main as bench_main

        bench_main(argv[1:])
        return
    parser = argparse.ArgumentParser(prog="petrel", description="Petrel: a message queue over plain HTTP.")
    sub = parser.add_subparsers(dest="command", required=True)
    _up_parser(sub)
    _serve_parser(sub)
    _store_parser(sub)
    _etl_parser(sub)
    keys.add_arguments(sub)
    o = sub.add_parser("openapi", help="write the services' OpenAPI specs to openapi/")
    o.add_argument("--check", action="store_true", help="only check; exit 1 when a committed spec is stale")
    o.add_argument("--dir", type=Path, default=Path("openapi"))
    sr = sub.add_parser("settings-reference", help="write docs/settings.md from the services' settings classes")
    sr.add_argument("--check", action="store_true", help="only check; exit 1 when docs/settings.md is stale")
    _receiver_parsers(sub)
    admin_commands.add_arguments(sub)
    sub.add_parser("bench", help="run the benchmark harness (same as `make bench`); `petrel bench --help`")
    args = parser.parse_args(argv)

    if args.command == "up":
        sys.exit(_up(args, argv))
    if args.command in admin_commands.COMMANDS:
        sys.exit(admin_commands.run(args))
    if args.command == "serve":
        from deploy.serve import serve

        sys.exit(serve(args.service, args.env_file, colocated=args.colocated))
    if args.command == "openapi":
        _openapi(args.dir, args.check)
        return
    if args.command == "settings-reference":
        from deploy import settings_reference

        if args.check and settings_reference.is_stale():
            sys.exit(f"{settings_reference.DEFAULT_PATH} is stale; run `.venv/bin/petrel settings-reference`")
        if not args.check:
            settings_reference.main()
        return
    if args.command == "store":
        sys.exit(_store(args))
    if args.command == "keys":
        sys.exit(keys.run(args))
    if args.command == "etl":
        from services.etl.command import daily, report

        sys.exit(report(args) if args.job == "report" else daily(args))
    if args.command in ("webhook-receiver", "checkback-receiver"):
        _run_receiver(args)
