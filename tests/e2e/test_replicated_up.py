"""`petrel up --replicas 1` as a real subprocess: the private etcd it starts, named in its banner, outlives a member."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from tests.support.etcd import etcd_binary
from tests.support.petrel_up import petrel_up
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e


def put(url: str) -> bool:
    """A put through etcd's JSON gateway (key and value base64: "/petrel-test/k" = "v") answered by `url`."""
    try:
        reply = httpx.post(f"{url}/v3/kv/put", json={"key": "L3BldHJlbC10ZXN0L2s=", "value": "dg=="}, timeout=2)
    except httpx.HTTPError:
        return False
    return reply.status_code == 200 and "error" not in reply.json()


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_petrel_up_replicas_starts_three_etcd_members_that_outlive_the_loss_of_one(tmp_path: Path) -> None:
    etcd_binary()
    with petrel_up(tmp_path, "--replicas", "1", "--no-etl") as cluster:
        first = cluster.ports["etcd"]
        urls = [f"http://127.0.0.1:{first + 2 * i}" for i in range(3)]
        banner = cluster.output.read_text()
        assert all(url in banner for url in urls), banner
        assert "etcd:      3 members started here, keys under /petrel/" in banner
        assert all(healthy(url) for url in urls)

        killed = cluster.pid_of("etcd-1")
        os.kill(killed, signal.SIGKILL)

        wait_until(lambda: put(urls[1]) and put(urls[2]), "puts on the two members left", 10)
        wait_until(lambda: cluster.pid_of("etcd-1") != killed and healthy(urls[0]), "etcd-1 started again", 20)
