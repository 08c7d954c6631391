"""wrk, a C HTTP load generator, as the bench's load for HTTP sends: it is not the bottleneck a Python client is.

The harness's own client (bench.loadgen: aiohttp in one process) spends about as
much CPU on a request as the server it measures, on the same two cores, so it
held single sends to 0.57-0.64x of the FastAPI no-op where wrk measured 0.82x.
`wrk_sends` runs wrk with one thread and 32 keep-alive connections, POSTing the
same body bench.loadgen sends (`payload`): a Lua script (bench/lua/) counts an
answer only when it is a 2xx whose body names no failed batch entry (and, when
asked, holds a given text); half + commit pairs have a script of their own that
commits each half message's transaction on the next request. wrk takes whole
seconds: a fractional warm-up or window is rounded up. The warm-up is a run of
its own, not counted; the measured run's JSON line (bench/lua/tally.lua) becomes
a bench.loadgen.Tally.

`wrk_binary` finds wrk, or installs Debian's package as `make test` installs the
ones the tests need (deploy/install_debian_package.sh: apt-get as root, else a
message saying what to run); without it, `WrkMissing` says so.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.loadgen import API_KEY_ENV, CONNECTIONS, Tally, payload

LUA = Path(__file__).parent / "lua"
INSTALLER = Path(__file__).parent.parent / "deploy" / "install_debian_package.sh"
THREADS = 1
"""One thread drives 32 connections at over 50,000 requests a second here: more would only take a core's share."""
REQUEST_TIMEOUT = "10s"
_FOUND: list[str] = []


class WrkMissing(RuntimeError):
    """wrk is not installed and could not be installed here."""


def wrk_binary(installer: Path = INSTALLER) -> str:
    """The path of wrk; installed first (Debian's package) when it is not on the PATH."""
    if _FOUND:
        return _FOUND[0]
    found = shutil.which("wrk")
    if found is None:
        print("  wrk (the bench's HTTP load generator) is not installed: installing Debian's wrk", flush=True)
        subprocess.run(
            ["/bin/sh", str(installer), "wrk", "the bench's HTTP loads (wrk)", "command -v wrk"],
            check=False,
            timeout=600,
        )
        found = shutil.which("wrk")
    if found is None:
        raise WrkMissing(
            "wrk is not installed and could not be installed here (the message above says why): "
            "`apt-get install wrk` (Debian), or wrk from https://github.com/wg/wrk on the PATH"
        )
    _FOUND.append(found)
    return found


def wrk_sends(url: str, kind: str, warmup: float, seconds: float, api_key: str | None = None) -> Tally:
    """bench.loadgen's `kind` of sends (single, batch, delayed, transaction) to `url`, driven by wrk."""
    body, per_request = payload(kind)
    script = "transaction.lua" if kind == "transaction" else "post.lua"
    env = {API_KEY_ENV: api_key} if api_key else {}
    return wrk_posts(url, body, per_request, warmup, seconds, script=script, env=env)


def wrk_posts(
    url: str,
    body: bytes,
    messages_per_request: int,
    warmup: float,
    seconds: float,
    *,
    script: str = "post.lua",
    require: str | None = None,
    headers: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> Tally:
    """POST `body` to `url` over 32 connections for `seconds` after `warmup`; answers that count: 2xx (holding
    `require`, given). `headers` are wrk's -H lines ("Name: value")."""
    binary = wrk_binary()
    with tempfile.TemporaryDirectory(prefix="petrel-bench-wrk-") as directory:
        body_file = Path(directory) / "body.json"
        body_file.write_bytes(body)
        command = [binary, f"-t{THREADS}", f"-c{CONNECTIONS}", "--timeout", REQUEST_TIMEOUT, "-s", str(LUA / script)]
        command += [arg for header in headers for arg in ("-H", header)]
        arguments = [url, "--", str(body_file), *([require] if require else [])]
        if warmup > 0:
            _run([*command, f"-d{_whole_seconds(warmup)}s", *arguments], env)
        counted = _run([*command, f"-d{_whole_seconds(seconds)}s", *arguments], env)
    return tally_of(counted, messages_per_request)


def tally_of(counted: dict[str, Any], messages_per_request: int) -> Tally:
    """The Tally of wrk's JSON line: answers that did not count and requests lost to socket errors are errors."""
    socket_errors = int(counted["socket_errors"])
    errors = int(counted["failed"]) + socket_errors
    first_error = counted["first_error"] or (f"{socket_errors} socket errors (wrk)" if socket_errors else None)
    return Tally(
        requests=int(counted["ok"]) + errors,
        errors=errors,
        first_error=first_error,
        seconds=float(counted["seconds"]),
        messages_per_request=messages_per_request,
    )


def _whole_seconds(seconds: float) -> int:
    return max(1, math.ceil(seconds - 1e-9))


def _run(command: list[str], env: dict[str, str] | None) -> dict[str, Any]:
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, check=False, env=os.environ | (env or {})
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"wrk failed ({done.returncode}): {' '.join(command)}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    counted: dict[str, Any] = json.loads(lines[-1])
    return counted
