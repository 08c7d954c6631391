"""`petrel serve <service>`: one Petrel service in the foreground, for a host (or a systemd unit) of its own.

A service runs exactly as `python -m <its module>` runs it, through the same entry point:
the nameserver's, the broker's and the gateway's `__main__` are run as they are (runpy),
the timer's and push's `main()` is called, and txcheck is its three processes, as under
`petrel up`: `python -m services.txcheck serve | worker | beat` (deploy.process_group).
Settings come from the environment only, as for `python -m`.

- `--env-file PATH`: KEY=VALUE lines put in the environment first; blank lines and lines
  starting with `#` are skipped (a `#` after a value is part of it), `export ` before a
  name and quotes around a value are allowed.
  A variable the environment already has wins over the file's (set one on the command
  line to try a value).
- Before the service starts, its settings are built once and its cluster token read: a bad
  setting is one line naming the variable, exit 2, rather than a traceback from inside it.
- `--colocated` (gateway only): the gateway and its one broker in this one process, the
  broker's settings from PETREL_BROKER_* as `petrel serve broker` reads them (deploy.colocated);
  a broker with replicas or a gateway sharing its port is refused (exit 2).
- SIGTERM (what systemd stops a service with) ends it cleanly, exit 0: uvicorn sends the
  signal again once it has shut down, which here exits rather than kills the process.
  Ctrl-C ends it as cleanly, exit 130.
"""

from __future__ import annotations

import os
import re
import runpy
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from pydantic import ValidationError
from pydantic_settings import SettingsError

from libs.cluster_token import ClusterTokenError, require_token_off_loopback
from libs.settings import ServiceSettings

SERVICES = ("nameserver", "broker", "timer", "txcheck", "push", "gateway")
"""What `petrel serve` runs, in the order a cluster is started."""
BAD_SETTING = 2
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class EnvFileError(ValueError):
    """An env file that cannot be read or has a line that is not KEY=VALUE: the message says where."""


class SettingsProblem(ValueError):
    """A setting the service would refuse at start: the message names the variable."""


def serve(service: str, env_file: Path | None = None, *, colocated: bool = False) -> int:
    """Run `service` until it is stopped; its exit status. `colocated`: the gateway with its broker in this process."""
    try:
        if env_file is not None:
            for name, value in read_env_file(env_file).items():
                os.environ.setdefault(name, value)
        if colocated:
            colocated_check(service)
        else:
            settings_check(service)
    except (EnvFileError, SettingsProblem) as exc:
        print(f"petrel serve {service}: {exc}", file=sys.stderr)
        return BAD_SETTING
    signal_exit_cleanly()
    try:
        return _colocated() if colocated else _ENTRY_POINTS[service]()
    except KeyboardInterrupt:  # Ctrl-C in a terminal: uvicorn has shut down, the signal comes back as this
        return 130


def read_env_file(path: Path) -> dict[str, str]:
    """The KEY=VALUE lines of `path`, in order."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise EnvFileError(f"--env-file {path}: {reason}") from None
    values: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        name, equals, value = text.removeprefix("export ").partition("=")
        name = name.strip()
        if not equals or not ENV_NAME.fullmatch(name):
            raise EnvFileError(f"--env-file {path}, line {number}: not NAME=VALUE: {text[:60]!r}")
        values[name] = _unquoted(value.strip())
    return values


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def settings_check(service: str) -> None:
    """Build the service's settings as it will, and read its cluster token; SettingsProblem if either fails."""
    from deploy.settings_reference import services
    from gateway.settings import GatewaySettings

    cls = services()[service]
    try:
        settings = cls()
        require_token_off_loopback(service, settings.host, settings.cluster_token())
        if isinstance(settings, GatewaySettings):
            settings.auth_required()  # as gateway.app checks it, before anything opens
    except ValidationError as exc:
        raise SettingsProblem("; ".join(_validation_lines(cls, exc))) from None
    except (SettingsError, ClusterTokenError, ValueError) as exc:
        raise SettingsProblem(str(exc)) from None


def colocated_check(service: str) -> None:
    """The broker's and the gateway's settings as colocated mode builds them; SettingsProblem if they do not fit."""
    from deploy.colocated import refusal
    from gateway.settings import GatewaySettings
    from services.broker.settings import BrokerSettings

    if service != "gateway":
        raise SettingsProblem("--colocated runs the gateway with its broker: petrel serve gateway --colocated")
    settings_check("broker")
    settings_check("gateway")
    problem = refusal(BrokerSettings(), GatewaySettings())
    if problem is not None:
        raise SettingsProblem(problem)


def _validation_lines(cls: type[ServiceSettings], exc: ValidationError) -> list[str]:
    """One per error: the variable and what is wrong (an error of several fields at once names none)."""
    lines = []
    for error in exc.errors():
        message = error["msg"].removeprefix("Value error, ")
        lines.append(f"{variable_of(cls, str(error['loc'][0]))}: {message}" if error["loc"] else message)
    return lines


def variable_of(cls: type[ServiceSettings], field: str) -> str:
    """The variable a field was read from: the service's spelling, or the cluster-wide one when only it is set."""
    own = f"{cls.model_config.get('env_prefix', 'PETREL_')}{field}".upper()
    bare = f"PETREL_{field}".upper()
    if field in cls.cluster_only_fields():
        return bare
    if field in cls.shared_fields() and own not in os.environ and bare in os.environ:
        return bare
    return own


def signal_exit_cleanly() -> None:
    """SIGTERM ends the process with status 0, wherever it arrives (uvicorn takes it over while it serves)."""

    def exit_cleanly(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, exit_cleanly)


def _as_main(module: str) -> Callable[[], int]:
    """Runs `python -m <module>`'s code in this process, with no arguments, as that command would."""

    def run() -> int:
        sys.argv[1:] = []
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0

    return run


def _timer() -> int:
    from services.timer.__main__ import main

    main()
    return 0


def _push() -> int:
    from services.push.__main__ import main

    main()
    return 0


def _colocated() -> int:
    from deploy.colocated import main

    main()
    return 0


def _txcheck() -> int:
    from deploy.process_group import Member, ProcessGroup
    from services.txcheck.__main__ import ROLES

    members = [Member(f"txcheck-{role}", [sys.executable, "-m", "services.txcheck", role]) for role in ROLES]
    return ProcessGroup(members).run()


_ENTRY_POINTS: dict[str, Callable[[], int]] = {
    "nameserver": _as_main("services.nameserver"),
    "broker": _as_main("services.broker"),  # its __main__ decides how it runs (and restarts): followed as it is
    "timer": _timer,
    "txcheck": _txcheck,
    "push": _push,
    "gateway": _as_main("gateway"),
}
