"""Failover time: kill -9 of a replicated broker name's master, until the gateway answers a send again.

The master's process is killed (`petrel up` reports it and keeps the rest running); a send
goes through the gateway every 50 ms until one is answered 2xx, by the slave the controller
promoted. The time includes the controller's master timeout (3 s), the promoted broker's
restart as master, its registration and the gateway's new route.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.error

from bench.cluster import Cluster, Refused, request_json

POLL_SECONDS = 0.05
GIVE_UP_SECONDS = 60.0


def failover_seconds(cluster: Cluster, master: str, topic: str) -> float:
    """Seconds from kill -9 of process `master` to the first send to `topic` the gateway answers 2xx."""
    url = f"{cluster.url}/v1/topics/{topic}/messages"
    os.kill(cluster.running_pids()[master], signal.SIGKILL)
    killed = time.monotonic()
    while (elapsed := time.monotonic() - killed) < GIVE_UP_SECONDS:
        try:
            request_json("POST", url, {"body": "after the failover"})
            return time.monotonic() - killed
        except (Refused, urllib.error.URLError, OSError):
            time.sleep(POLL_SECONDS)
    raise RuntimeError(f"no send was answered in {elapsed:.0f} s after kill -9 of {master}")
