"""A network partition of a SYNC_MASTER, on test hosts made of network namespaces (tests.support.netns).

Hosts: `ctl` runs etcd, the nameserver with the controller and the gateway; `b1` and `b2`
run broker-a's ids 0 and 1, SYNC_MASTER under the controller, b1 the first master. Under a
load through the gateway and straight to b1, b1's cluster link is cut: it still runs, and
the test still reaches it over its management link, but it reaches neither etcd nor its
slave. Its etcd lease expires and the controller promotes b2 at epoch 2.

The epoch test: two masters never both acknowledge writes. Once its lease has run out
(before the controller may promote another) b1 answers no write 2xx, and says it is fenced;
none of its acknowledgments comes after b2's election. Healed, b1 learns the new master,
truncates what it stored and never had acknowledged, and follows b2 as its slave until
both logs are the same; every write either broker ever answered 2xx is on b2 at the queue
and offset it was answered with.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from libs.cluster_token import INTERNAL_TOKEN_HEADER, TOKEN_FILE_SETTING, ensure_token_file, read_token_file
from libs.controller_api import VIEW_PATH
from tests.support.answered_writes import Answer, Write, put, put_one, sample_until, send, write_until
from tests.support.crash_sends import read_topic
from tests.support.etcd import etcd_binary
from tests.support.netns import HostProcess, Hosts, netns_hosts, serving
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e

QUEUES = 4
WRITERS = 4
"""Per way in: through the gateway, straight to b1, straight to b2 (once it is master)."""
ACKED_BEFORE_CUT = 100
NAMESERVER_PORT, BROKER_PORT, GATEWAY_PORT = 9876, 10911, 8080
LEASE_MS = 2_000
ETCD_PORT = 2379
SYNC_TIMEOUT_MS = 3_000
TRUNCATED = re.compile(r"truncated this log from (\d+) to (\d+)")
T = TypeVar("T")


def environments(hosts: Hosts, tmp_path: Path) -> dict[str, dict[str, str]]:
    """Each service's settings: it listens on every address of its host and is called by its cluster address."""
    controller = f"{hosts['ctl'].cluster_ip}:{NAMESERVER_PORT}"
    token_file = ensure_token_file(tmp_path / "cluster.token")
    shared = {
        "PETREL_NAMESERVERS": controller,
        "PETREL_EVENTS_ENABLED": "false",
        TOKEN_FILE_SETTING: str(token_file),
        "PETREL_ETCD_ENDPOINTS": f"http://{hosts['ctl'].cluster_ip}:{ETCD_PORT}",
    }

    def broker(host: str, broker_id: int) -> dict[str, str]:
        return shared | {
            "PETREL_DATA_DIR": str(tmp_path / host),
            "PETREL_BROKER_HOST": "0.0.0.0",
            "PETREL_BROKER_PORT": str(BROKER_PORT),
            "PETREL_BROKER_ADVERTISED_ADDRESS": f"{hosts[host].cluster_ip}:{BROKER_PORT}",
            "PETREL_BROKER_BROKER_NAME": "broker-a",
            "PETREL_BROKER_BROKER_ID": str(broker_id),
            "PETREL_BROKER_ROLE": "SYNC_MASTER",
            "PETREL_BROKER_CONTROLLED": "true",
            "PETREL_BROKER_MASTER_LEASE_SECONDS": str(LEASE_MS // 1000),
            "PETREL_BROKER_SYNC_REPLICATION_TIMEOUT_MS": str(SYNC_TIMEOUT_MS),
            "PETREL_BROKER_SEGMENT_SIZE": str(8 * 1024 * 1024),
            "PETREL_BROKER_INDEX_SLOT_COUNT": "65536",
            "PETREL_BROKER_INDEX_MAX_ENTRIES": "400000",
            "PETREL_BROKER_CQ_UNITS_PER_FILE": "500",
            "PETREL_BROKER_REGISTER_INTERVAL_SECONDS": "0.5",
        }

    ctl = shared | {"PETREL_DATA_DIR": str(tmp_path / "ctl")}
    return {
        "nameserver": ctl
        | {
            "PETREL_NAMESERVER_HOST": "0.0.0.0",
            "PETREL_NAMESERVER_PORT": str(NAMESERVER_PORT),
            "PETREL_NAMESERVER_CONTROLLER": "true",
        },
        "b1": broker("b1", 0),
        "b2": broker("b2", 1),
        "gateway": ctl
        | {
            "PETREL_GATEWAY_HOST": "0.0.0.0",
            "PETREL_GATEWAY_PORT": str(GATEWAY_PORT),
            "PETREL_AUTH": "off",
            "PETREL_GATEWAY_INSECURE_NO_AUTH": "true",  # on a network of namespaces only this test reaches
        },
    }


def url(hosts: Hosts, host: str, port: int) -> str:
    """How the test calls a service: over its host's management link."""
    return f"http://{hosts[host].management_ip}:{port}"


async def start_cluster(hosts: Hosts, tmp_path: Path) -> dict[str, HostProcess]:
    env = environments(hosts, tmp_path)

    def python(host: str, name: str, module: str) -> HostProcess:
        return hosts.run(host, [sys.executable, "-m", module], env[name], name=name)

    ip = hosts["ctl"].cluster_ip
    etcd = [
        etcd_binary(),
        f"--data-dir={tmp_path / 'etcd'}",
        f"--listen-client-urls=http://0.0.0.0:{ETCD_PORT}",
        f"--advertise-client-urls=http://{ip}:{ETCD_PORT}",
        "--listen-peer-urls=http://127.0.0.1:2380",
        "--initial-advertise-peer-urls=http://127.0.0.1:2380",
        "--initial-cluster=default=http://127.0.0.1:2380",
        "--log-level=warn",
    ]
    started = {"etcd": hosts.run("ctl", etcd, {}, name="etcd")}
    await serving(started["etcd"], url(hosts, "ctl", ETCD_PORT), path="/health")
    started["nameserver"] = python("ctl", "nameserver", "services.nameserver")
    await serving(started["nameserver"], url(hosts, "ctl", NAMESERVER_PORT))
    for name in ("b1", "b2"):  # b1 first: a new broker name's first master is its lowest live id
        started[name] = python(name, name, "services.broker")
        await serving(started[name], url(hosts, name, BROKER_PORT))
    started["gateway"] = python("ctl", "gateway", "gateway")
    await serving(started["gateway"], url(hosts, "ctl", GATEWAY_PORT))
    return started


async def status(broker: httpx.AsyncClient, **params: int) -> dict[str, Any]:
    answer = await broker.get("/internal/replication", params=params)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def status_or_none(broker: httpx.AsyncClient) -> dict[str, Any] | None:
    """None while the broker does not answer (it restarts its app to take a new role)."""
    try:
        answer = await broker.get("/internal/replication")
    except httpx.HTTPError:
        return None
    return dict(answer.json()) if answer.status_code == 200 else None


async def when(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 15.0) -> float:
    """When (time.monotonic) `check()` was first seen true."""
    await eventually(check, what, timeout)
    return time.monotonic()


def acked(answers: list[Answer], *writers: str) -> list[Answer]:
    return [a for a in answers if a.acked and a.writer.split("-")[0] in writers]


@dataclass
class Partition:
    """One run of the test: the clients (over the management links), every answer, and when each step happened."""

    hosts: Hosts
    gateway: httpx.AsyncClient
    b1: httpx.AsyncClient
    b2: httpx.AsyncClient
    controller: httpx.AsyncClient
    answers: list[Answer] = field(default_factory=list)
    b1_seen: list[tuple[float, dict[str, Any] | None]] = field(default_factory=list)
    """b1's status from the cut to the end (None: it did not answer)."""
    at: dict[str, float] = field(default_factory=dict)
    """time.monotonic() of each step: cut, elected, promoted, healed."""
    b1_writing: asyncio.Event = field(default_factory=asyncio.Event)
    others_writing: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    def spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.create_task(work)
        self.tasks.append(task)
        return task

    def write(self, stop: asyncio.Event, writes: Write) -> None:
        self.spawn(write_until(stop, writes, self.answers))

    async def cancel(self) -> None:
        """What still runs when the test failed half-way: cancelled, not left for the loop to find."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def load(self) -> None:
        """Writes through the gateway and straight to b1, until each has had ACKED_BEFORE_CUT acknowledged."""
        assert (await self.gateway.put("/v1/topics/crash", json={"queues": QUEUES})).status_code == 201
        joined = await status(self.b1, in_sync=1, wait_ms=20_000)
        assert (joined["role"], joined["epoch"], joined["in_sync"], joined["electable"]) == (
            "SYNC_MASTER",
            1,
            [1],
            [1],
        ), joined
        for i in range(WRITERS):
            self.write(self.others_writing, send(self.gateway, f"gateway-{i}"))
            self.write(self.b1_writing, put(self.b1, f"b1-{i}", QUEUES))

        async def loaded() -> bool:
            return min(len(acked(self.answers, "gateway")), len(acked(self.answers, "b1"))) >= ACKED_BEFORE_CUT

        await eventually(loaded, f"{ACKED_BEFORE_CUT} writes acknowledged through the gateway and by b1", timeout=20)
        before = await status(self.b1)
        assert before["in_sync"] == [1], f"b2 left the in-sync set under the load, before the cut: {before}"

    def cut(self) -> asyncio.Task[Answer]:
        """b1's cluster link cut; a put to b1 right after it, which b1 stores and b2 never gets (its answer)."""
        self.at["cut"] = time.monotonic()
        self.hosts.cut("b1")
        self.spawn(sample_until(self.b1_writing, lambda: status_or_none(self.b1), self.b1_seen))
        return self.spawn(put_one(self.b1, "b1", "b1-after-the-cut", 0))

    async def fail_over(self) -> asyncio.Task[Answer]:
        """Until b2 is master and writes are acknowledged by it and through the gateway again; the answer to one send
        through the gateway made as soon as b2 was master."""

        async def elected() -> bool:
            (group,) = (await self.controller.get(VIEW_PATH)).json()["broker_names"]
            return bool(group["assignment"]["epoch"] == 2)

        async def promoted() -> bool:
            now = await status_or_none(self.b2)
            return now is not None and (now["role"], now["epoch"]) == ("SYNC_MASTER", 2)

        self.at["elected"], self.at["promoted"] = await asyncio.gather(
            when(elected, "the controller elects b2 at epoch 2"), when(promoted, "b2 runs as master at epoch 2")
        )
        probe = self.spawn(send(self.gateway, "gateway-probe")(0))
        for i in range(WRITERS):
            self.write(self.others_writing, put(self.b2, f"b2-{i}", QUEUES))

        async def resumed() -> bool:
            through_gateway = [a for a in acked(self.answers, "gateway") if a.sent_at > self.at["cut"]]
            return min(len(through_gateway), len(acked(self.answers, "b2"))) >= ACKED_BEFORE_CUT // 2

        await eventually(resumed, "writes acknowledged through the gateway and by b2 after the failover", timeout=30)
        return probe

    async def heal(self) -> None:
        """b1's link back: until b1 runs as b2's slave at epoch 2; then every writer stops (and every task ends)."""
        self.at["healed"] = time.monotonic()
        self.hosts.heal("b1")
        b2_address = f"{self.hosts['b2'].cluster_ip}:{BROKER_PORT}"

        async def follows() -> bool:
            now = await status_or_none(self.b1)
            return now is not None and (now["role"], now["epoch"], now["master"]) == ("SLAVE", 2, b2_address)

        await eventually(follows, "b1, healed, restarts as b2's slave at epoch 2", timeout=20)
        self.b1_writing.set()
        self.others_writing.set()
        await asyncio.gather(*self.tasks)

    def since_cut(self, at: float) -> str:
        return f"{at - self.at['cut']:.2f} s"


async def test_a_partitioned_master_is_fenced_before_its_slave_is_promoted_and_returns_as_its_slave(
    tmp_path: Path,
) -> None:
    with netns_hosts(tmp_path / "logs", "ctl", "b1", "b2") as hosts:
        started = await start_cluster(hosts, tmp_path)
        headers = {INTERNAL_TOKEN_HEADER: read_token_file(tmp_path / "cluster.token")}
        async with AsyncExitStack() as stack:
            gateway, b1, b2, controller = [
                await stack.enter_async_context(
                    httpx.AsyncClient(base_url=url(hosts, host, port), headers=headers, timeout=15)
                )
                for host, port in (
                    ("ctl", GATEWAY_PORT),
                    ("b1", BROKER_PORT),
                    ("b2", BROKER_PORT),
                    ("ctl", NAMESERVER_PORT),
                )
            ]
            run = Partition(hosts, gateway, b1, b2, controller)
            try:
                await run.load()
                unreplicated = run.cut()
                probe = await run.fail_over()
                cut_off = await status(b1)
                await run.heal()
            finally:
                await run.cancel()
            run.answers.append(probe.result())

            check_the_epoch_test(run)
            after_the_cut = unreplicated.result()
            assert (after_the_cut.status, after_the_cut.problem) == (503, "replication-timeout"), after_the_cut
            assert (cut_off["role"], cut_off["epoch"], cut_off["fenced"]) == ("SYNC_MASTER", 1, True), cut_off
            truncated = await check_the_return(run, started["b1"], cut_off["commitlog_end"])
        print_the_timeline(run, truncated)


def print_the_timeline(run: Partition, truncated: int) -> None:
    """For the record: when each step came after the cut."""
    last_by_b1 = max(a.answered_at for a in acked(run.answers, "b1"))
    fenced = next(at for at, seen in run.b1_seen if seen is not None and seen["fenced"])
    through_gateway = min(a.answered_at for a in acked(run.answers, "gateway") if a.sent_at > run.at["cut"])
    (probe,) = [a for a in run.answers if a.writer == "gateway-probe"]
    print(
        f"\npartition of the master, after the cut: b1's last acknowledgment {run.since_cut(last_by_b1)}, "
        f"b1 seen fenced {run.since_cut(fenced)}, b2 elected {run.since_cut(run.at['elected'])}, b2 master "
        f"{run.since_cut(run.at['promoted'])}, first send answered through the gateway "
        f"{run.since_cut(through_gateway)} (a send made once b2 was master: {probe.status} after "
        f"{probe.answered_at - probe.sent_at:.2f} s); b1 truncated {truncated} bytes on its return; "
        f"{len(acked(run.answers, 'gateway', 'b1', 'b2'))} writes acknowledged, all on b2"
    )


def check_the_epoch_test(run: Partition) -> None:
    """No write acknowledged by b1 once b2 may be master; b1 fenced from its lease's end until it heard again."""
    cut_at, elected_at = run.at["cut"], run.at["elected"]
    by_b1 = acked(run.answers, "b1")
    late = [a for a in by_b1 if a.answered_at >= elected_at]
    assert not late, f"split brain: b1 acknowledged {len(late)} write(s) after b2 was elected, e.g. {late[:3]}"
    past_lease = [a for a in by_b1 if a.sent_at > cut_at + LEASE_MS / 1000]
    assert not past_lease, f"b1 acknowledged {len(past_lease)} write(s) sent after its lease ran out: {past_lease[:3]}"

    cut_off = [(at, seen) for at, seen in run.b1_seen if at < run.at["healed"] and seen is not None]
    fenced = [at for at, seen in cut_off if seen["fenced"]]
    assert fenced, f"b1 was never seen fenced while cut off: {cut_off[-3:]}"
    assert fenced[0] < elected_at, f"b1 was fenced {fenced[0] - elected_at:.2f} s after b2's election"
    unfenced = [(at - cut_at, seen) for at, seen in cut_off if at > fenced[0] and not seen["fenced"]]
    assert not unfenced, f"b1 was fenced, then not, while cut off: {unfenced[:3]}"
    refused = {a.problem for a in run.answers if a.writer.startswith("b1") and a.sent_at > cut_at and not a.acked}
    assert "not-master" in refused, refused


async def check_the_return(run: Partition, b1_process: HostProcess, cut_off_end: int) -> int:
    """b1 truncated its log (which ended at `cut_off_end`) to where b2's epoch 2 began, caught up, and holds what
    b2 holds; every acknowledged write is on b2 as it was answered. The bytes b1 truncated."""
    rejoined = await status(run.b2, in_sync=0, wait_ms=20_000)
    assert (rejoined["in_sync"], rejoined["electable"]) == ([0], [0]), rejoined
    sent = await run.gateway.post("/v1/topics/crash/messages", json={"body": "with b1 in sync again"})
    assert sent.status_code == 201, sent.text

    async def same_log() -> bool:
        return bool((await status(run.b1))["commitlog_end"] == (await status(run.b2))["commitlog_end"])

    await eventually(same_log, "b1 has b2's log")
    on_b2 = await read_topic(run.b2, QUEUES)
    assert await read_topic(run.b1, QUEUES) == on_b2
    lost = [a for a in acked(run.answers, "gateway", "b1", "b2") if on_b2.get(a.message_id) != expected(a)]
    assert not lost, f"{len(lost)} acknowledged writes are not on b2 as answered, e.g. {lost[:3]}"
    assert "b1-after-the-cut" not in on_b2, "b2 holds the put b1 took after the cut"

    epochs = (await run.b2.get("/internal/replication/epochs")).json()["epochs"]
    assert [epoch for epoch, _ in epochs] == [1, 2], epochs
    (truncation,) = [(int(m[1]), int(m[2])) for m in TRUNCATED.finditer(b1_process.log())]
    assert truncation == (cut_off_end, epochs[1][1]), f"truncated {truncation}; epochs of b2: {epochs}"
    return truncation[0] - truncation[1]


def expected(answer: Answer) -> tuple[int | None, int | None, str]:
    return answer.queue_id, answer.queue_offset, answer.body
