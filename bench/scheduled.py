"""Scheduled-delivery helpers for the `timers` scenario: send, read back, watch and restart the timer.

Every message's body is its index (zero-padded), so a delivered copy is matched
to the send answer that gave its `deliver_at` without trusting anything else;
two copies of one body are a duplicate delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from bench.cluster import Cluster

SEND_BATCH = 256
SENDERS = 8
PULL_MAX = 256
BROKER = "broker-a"


def body_of(index: int) -> str:
    return f"{index:016d}"  # 16 bytes


@dataclass(slots=True)
class Sent:
    deliver_at: dict[int, int] = field(default_factory=dict)
    """index -> deliver_at (ms) from the send answer (only when the answers are kept)."""
    errors: int = 0
    first_error: str | None = None
    seconds: float = 0.0
    finished_at_ms: int = 0


async def send_scheduled(
    url: str, topic: str, count: int, due: Callable[[int], int], *, keep: bool = True, senders: int = SENDERS
) -> Sent:
    """Send `count` messages (index i due at `due(i)`, epoch ms) in batches of 256 over `senders` connections."""
    import aiohttp

    sent = Sent()
    endpoint = f"{url}/v1/topics/{topic}/messages:batch"
    headers = {"content-type": "application/json"}
    starts = iter(range(0, count, SEND_BATCH))
    started = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=senders)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def sender() -> None:
            for first in starts:
                indexes = range(first, min(first + SEND_BATCH, count))
                payload = orjson.dumps({"messages": [{"body": body_of(i), "deliver_at": due(i)} for i in indexes]})
                async with session.post(endpoint, data=payload, headers=headers) as response:
                    answer = await response.read()
                    status = response.status
                if status >= 300:
                    sent.errors += len(indexes)
                    sent.first_error = sent.first_error or f"{status} {answer[:300]!r}"
                    continue
                if not keep and b'"error":{' not in answer:
                    continue
                for entry in orjson.loads(answer)["results"]:
                    result = entry.get("result")
                    if result is None:
                        sent.errors += 1
                        sent.first_error = sent.first_error or repr(entry.get("error"))[:300]
                    elif keep:
                        sent.deliver_at[indexes[entry["index"]]] = int(result["deliver_at"])

        await asyncio.gather(*(sender() for _ in range(senders)))
    sent.seconds = time.perf_counter() - started
    sent.finished_at_ms = now_ms()
    if sent.errors:
        print(f"  WARNING: {sent.errors} of {count} scheduled sends failed; first: {sent.first_error}", flush=True)
    return sent


@dataclass(frozen=True, slots=True)
class Delivered:
    body: str
    stored_at: int
    message_id: str


async def topic_size(url: str, topic: str, queues: int) -> int:
    """Messages in the topic now (sum of every queue's max offset)."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        total = 0
        for q in range(queues):
            params = {"offset": "0", "max": "1", "broker": BROKER}
            async with session.get(f"{url}/v1/topics/{topic}/queues/{q}/messages", params=params) as response:
                response.raise_for_status()
                total += int((await response.json())["max_offset"])
        return total


async def read_topic(url: str, topic: str, queues: int) -> list[Delivered]:
    """Every message now in the topic, pulled queue by queue from offset 0."""
    import aiohttp

    async with aiohttp.ClientSession() as session:

        async def queue(q: int) -> list[Delivered]:
            found: list[Delivered] = []
            offset = 0
            while True:
                params = {"offset": str(offset), "max": str(PULL_MAX), "broker": BROKER}
                async with session.get(f"{url}/v1/topics/{topic}/queues/{q}/messages", params=params) as response:
                    response.raise_for_status()
                    page: dict[str, Any] = orjson.loads(await response.read())
                found += [Delivered(m["body"], int(m["stored_at"]), m["message_id"]) for m in page["messages"]]
                if page["next_offset"] <= offset or page["next_offset"] >= page["max_offset"]:
                    return found
                offset = page["next_offset"]

        pages = await asyncio.gather(*(queue(q) for q in range(queues)))
    return [m for page in pages for m in page]


async def wait_delivered(url: str, topic: str, queues: int, count: int, limit: float, poll: float = 0.5) -> bool:
    """Wait (at most `limit` seconds) until the topic holds `count` messages."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if await topic_size(url, topic, queues) >= count:
            return True
        await asyncio.sleep(poll)
    return False


async def timer_stats(url: str) -> dict[str, Any]:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(f"{url}/v1/timers/stats") as response:
        response.raise_for_status()
        stats: dict[str, Any] = await response.json()
        return stats


def now_ms() -> int:
    return int(time.time() * 1000)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return float(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))])


# ---- processes ---------------------------------------------------------------------------


def process(cluster: Cluster, name: str) -> dict[str, Any]:
    for entry in cluster.processes():
        if entry["name"] == name:
            found: dict[str, Any] = entry
            return found
    raise LookupError(f"no process {name!r} in the cluster state")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise LookupError(f"no VmRSS for pid {pid}")


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(): v.decode() for k, v in pairs}


def cmdline_of(pid: int) -> list[str]:
    return [part.decode() for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if part]


@contextlib.contextmanager
def restarted(command: list[str], env: dict[str, str], url: str, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Start the timer again as the launcher did (same command and env); stop it when done."""
    with log_path.open("ab") as log:
        child = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_healthy(url, child)
        yield child
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _wait_healthy(url: str, child: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"the restarted timer exited with code {child.returncode}")
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            if response.status == 200:
                return
        time.sleep(0.1)
    raise TimeoutError(f"the restarted timer did not answer at {url} after {timeout:.0f} s")


def kill_hard(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            return
        if "State:\tZ" in status:  # a zombie until the launcher reaps it: it is dead
            return
        time.sleep(0.05)


def port_of(url: str) -> int:
    port = urlsplit(url).port
    if port is None:
        raise ValueError(f"no port in {url}")
    return port


def warnings_in(path: Path, last: int = 3) -> str:
    """The last few distinct WARNING/ERROR lines of a service's log (to say why a phase fell short)."""
    if not path.exists():
        return f"(no log at {path})"
    lines = [line for line in path.read_text(errors="replace").splitlines() if "WARNING" in line or "ERROR" in line]
    distinct: list[str] = []
    for line in reversed(lines):
        text = line.split(" ", 2)[-1][:300]
        if text not in distinct:
            distinct.append(text)
        if len(distinct) == last:
            break
    return "\n".join(f"    {line}" for line in reversed(distinct)) or "    (no warnings in the log)"
