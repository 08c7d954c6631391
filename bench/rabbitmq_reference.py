"""A peer a user could pick instead of Petrel: RabbitMQ's HTTP publish API (`petrel bench datapath --peers`).

The local RabbitMQ (127.0.0.1, guest/guest) answers HTTP on :15672 once its
management plugin is on; `management_api` turns it on when it is off
(`rabbitmq-plugins enable rabbitmq_management`, said in a line, and left on) and
waits for the API; either way the run says so. The load: a durable queue of its own, and wrk POSTing
`/api/exchanges/%2F/amq.default/publish` with a 1 KiB payload as a persistent
message (delivery_mode 2) over 32 connections; an answer counts when it is a
2xx that says `"routed":true`. The queue is deleted afterwards. Without
RabbitMQ, or when its plugin cannot be enabled, `management_api` says why and
answers None, and the figure is left out of the run.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

from bench.loadgen import TEXT_BODY, Tally
from bench.wrk import wrk_posts

API = "http://127.0.0.1:15672/api"
USER, PASSWORD = "guest", "guest"
PLUGIN = "rabbitmq_management"
READY_S = 60.0
AUTHORIZATION = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def management_api(api: str = API) -> str | None:
    """The management API's URL, the plugin enabled first when it is off; None (said why) when it cannot be had."""
    if _answers(api):
        print(f"  RabbitMQ's management plugin ({PLUGIN}) is on: publishing through its HTTP API at {api}", flush=True)
        return api
    plugins = shutil.which("rabbitmq-plugins")
    if plugins is None:
        print("  RabbitMQ is not installed here (no rabbitmq-plugins): its HTTP publish figure is left out", flush=True)
        return None
    print(f"  enabling RabbitMQ's management plugin for its HTTP publish API: rabbitmq-plugins enable {PLUGIN}")
    done = subprocess.run([plugins, "enable", PLUGIN], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        print(f"  rabbitmq-plugins enable {PLUGIN} failed ({done.returncode}); the figure is left out:", flush=True)
        print(f"  {(done.stderr or done.stdout).strip()[-500:]}", flush=True)
        return None
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if _answers(api):
            print(f"  RabbitMQ's management plugin is now on (it stays on): its HTTP API at {api}", flush=True)
            return api
        time.sleep(0.5)
    print(f"  RabbitMQ's management API did not answer on {api} within {READY_S:.0f} s: the figure is left out")
    return None


def publishes(api: str, warmup: float, seconds: float) -> Tally:
    """Persistent 1 KiB messages published to a durable queue of this run's through the HTTP API, by wrk."""
    with durable_queue(api) as queue:
        body = {
            "properties": {"delivery_mode": 2},
            "routing_key": queue,
            "payload": TEXT_BODY,
            "payload_encoding": "string",
        }
        return wrk_posts(
            f"{api}/exchanges/%2F/amq.default/publish",
            json.dumps(body).encode(),
            1,
            warmup,
            seconds,
            require='"routed":true',
            headers=[f"Authorization: {AUTHORIZATION}"],
        )


@contextlib.contextmanager
def durable_queue(api: str) -> Iterator[str]:
    """A durable queue (a name of this run's) on the default vhost, deleted afterwards."""
    name = f"petrel-bench-{uuid.uuid4().hex[:12]}"
    _call("PUT", f"{api}/queues/%2F/{name}", {"durable": True, "auto_delete": False})
    try:
        yield name
    finally:
        _call("DELETE", f"{api}/queues/%2F/{name}")


def _call(method: str, url: str, body: object = None) -> None:
    data = None if body is None else json.dumps(body).encode()
    headers = {"authorization": AUTHORIZATION, "content-type": "application/json"}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()


def _answers(api: str) -> bool:
    request = urllib.request.Request(f"{api}/overview", headers={"authorization": AUTHORIZATION})
    try:
        with urllib.request.urlopen(request, timeout=2) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False
