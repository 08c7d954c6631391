"""The batch reference driven by redis-benchmark (C), as our batches are by wrk: XADD pipelined 32, 32 clients.

The Python client (bench.redis_reference's send load, redis-py in one process)
held Redis to about a quarter of what redis-benchmark gets from the same server
here (37,000 against 135,000 XADDs a second, minutes apart): the reference was
measuring its client. `xadds` runs `redis-benchmark -c 32 -P 32 XADD KEY * body
<1 KiB>` on a stream of its own: a short run sizes the measured one to about
`seconds` (at most MAX_ENTRIES entries, to bound Redis' memory), the warm-up is a
run of its own, and the stream is emptied between runs and deleted after. The
rate is redis-benchmark's own (its requests over its run); an XADD that Redis
refused is an error (the stream's length is checked against the requests).
None when redis-benchmark is not installed (Debian: redis-tools).
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import urllib.parse
import uuid

from bench.loadgen import BATCH, CONNECTIONS, TEXT_BODY, Tally

SIZING_ENTRIES = 32 * 32 * 20
MAX_ENTRIES = 1_500_000
"""about 1.7 GB of stream at most, deleted after"""


def xadds(url: str, warmup: float, seconds: float) -> Tally | None:
    """XADD pipelined 32 by 32 clients of the Redis at `url` for about `seconds`; None without redis-benchmark."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return None
    address = urllib.parse.urlsplit(url)
    server = ["-h", address.hostname or "127.0.0.1", "-p", str(address.port or 6379)]
    key = f"petrel-bench-{uuid.uuid4().hex}"
    try:
        rate = _run(binary, server, key, SIZING_ENTRIES)
        if warmup > 0:
            _run(binary, server, key, _entries(rate, warmup))
        requests = _entries(rate, seconds)
        measured = _run(binary, server, key, requests)
        stored = int(_cli(server, "XLEN", key))
    finally:
        _cli(server, "DEL", key)
    errors = requests - stored
    return Tally(
        requests=requests // BATCH,
        errors=errors // BATCH + (errors % BATCH > 0),
        first_error=f"{errors} XADDs missing from the stream" if errors else None,
        seconds=requests / measured,
        messages_per_request=BATCH,
    )


def _entries(rate: float, seconds: float) -> int:
    wanted = int(rate * seconds) // (BATCH * CONNECTIONS) * BATCH * CONNECTIONS
    return max(BATCH * CONNECTIONS, min(wanted, MAX_ENTRIES))


def _run(binary: str, server: list[str], key: str, requests: int) -> float:
    """One redis-benchmark run of `requests` XADDs on an empty `key`; its requests a second."""
    _cli(server, "DEL", key)
    command = [binary, *server, "-c", str(CONNECTIONS), "-P", str(BATCH), "-n", str(requests), "--csv"]
    command += ["XADD", key, "*", "body", TEXT_BODY]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    rows = list(csv.DictReader(done.stdout.splitlines()))
    if done.returncode != 0 or not rows:
        raise RuntimeError(f"redis-benchmark failed ({done.returncode}): {done.stderr[-1000:]}")
    return float(rows[-1]["rps"])


def _cli(server: list[str], *command: str) -> str:
    done = subprocess.run(["redis-cli", *server, *command], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()
