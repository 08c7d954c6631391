"""The nemesis run: the workload through the gateway while rounds of faults come and go; then the read-back and
the verdict.

Each round: a lead-in with the load running and no fault; its steps applied together (the second
a little after the first), each held and healed; then the load goes on until a send is answered
after the heal (up to `RESUME_GIVE_UP_S`), and a short tail. After the last round the load stops,
every queue of the topic is read back through the gateway from offset 0, and the checker gives
the verdict over the answers, the stored messages, the rounds' faults and the brokers' epochs.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypedDict

import httpx

from bench.nemesis import faults
from bench.nemesis.checker import Epochs, RoundLog, Stored, Verdict, check
from bench.nemesis.faults import BROKERS, Etcd, Fault
from bench.nemesis.plan import Nemesis, Round, Step, rounds
from bench.nemesis.workload import QUEUES, TOPIC, Workload

RESUME_GIVE_UP_S = 30.0
READ_BACK_GIVE_UP_S = 60.0
MASTER_OF = re.compile(r"controller: master of \S+ at epoch (\d+)")


@dataclass(frozen=True, slots=True)
class NemesisConfig:
    seed: int
    rounds: int
    hold_s: float
    """how long a killed process stays dead, at most (each step draws 0.5 to 1 times this)"""
    lead_s: float
    """load without a fault at the start of each round"""
    tail_s: float
    """load after the sends resumed, before the next round"""
    only: tuple[Nemesis, ...] = ()
    """the nemeses the rounds draw from (): all"""


class Pace(TypedDict):
    hold_s: float
    lead_s: float
    tail_s: float


QUICK = Pace(hold_s=1.5, lead_s=1.0, tail_s=1.0)
FULL = Pace(hold_s=4.0, lead_s=2.0, tail_s=2.0)


class Cluster(faults.Processes, Protocol):
    """The cluster a nemesis run drives (tests.support.cluster.LocalCluster, replicated, two nameservers, three etcd
    members)."""

    data_dir: Path

    async def controller_view(self) -> dict[str, Any]: ...

    def log(self, name: str) -> str: ...


@dataclass(slots=True)
class NemesisResult:
    config: NemesisConfig
    verdict: Verdict
    logs: list[RoundLog]
    workload: Workload
    failure: str | None = None
    """a fault that could not be applied or healed (a process that does not come back is a finding)"""

    @property
    def ok(self) -> bool:
        return self.failure is None and self.verdict.ok

    def report(self) -> str:
        text = self.verdict.report()
        return text if self.failure is None else f"{text}\nFAILURE: {self.failure}"


async def run_nemesis(cluster: Cluster, etcd: Etcd, gateway: httpx.AsyncClient, config: NemesisConfig) -> NemesisResult:
    planned = rounds(config.seed, config.rounds, hold_s=config.hold_s, members=len(etcd.members), only=config.only)
    answer = await gateway.put(f"/v1/topics/{TOPIC}", json={"queues": QUEUES})
    answer.raise_for_status()
    workload = Workload(f"nemesis-{uuid.uuid4().hex[:8]}")
    stop = asyncio.Event()
    writing = asyncio.create_task(workload.write(gateway, stop))
    logs: list[RoundLog] = []
    failure: str | None = None
    try:
        await _resumed(workload, time.monotonic())
        await _whole(cluster)  # the slave in the in-sync set first: a master killed before cannot be failed over
        for one in planned:
            print(f"  nemesis: round {one.number}: {one.name}", flush=True)
            log = RoundLog(one, time.monotonic(), 0.0)
            logs.append(log)
            try:
                await _round(cluster, etcd, workload, one, log, config)
            except Exception as exc:  # noqa: BLE001 - the run's finding, reported with its seed
                failure = f"round {one.number} ({one.name}): {type(exc).__name__}: {exc}"
                log.ended = time.monotonic()
                break
    finally:
        stop.set()
        await writing
    stored = await read_back(gateway)
    verdict = check(config.seed, workload.sends, stored, logs, epochs_of(cluster))
    return NemesisResult(config, verdict, logs, workload, failure)


async def _round(
    cluster: Cluster, etcd: Etcd, workload: Workload, one: Round, log: RoundLog, config: NemesisConfig
) -> None:
    await asyncio.sleep(config.lead_s)
    log.faults.extend(await asyncio.gather(*(_step(cluster, etcd, step) for step in one.steps)))
    await _resumed(workload, log.healed)
    await _whole(cluster)
    await asyncio.sleep(config.tail_s)
    log.ended = time.monotonic()


async def _step(cluster: Cluster, etcd: Etcd, step: Step) -> Fault:
    await asyncio.sleep(step.after_s)
    return await faults.apply(cluster, etcd, step)


async def _resumed(workload: Workload, since: float) -> None:
    """Until a send is answered after `since` (RuntimeError after RESUME_GIVE_UP_S)."""
    deadline = time.monotonic() + RESUME_GIVE_UP_S
    while workload.answered_since(since) == 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no send answered in {RESUME_GIVE_UP_S:.0f} s after the faults were healed")
        await asyncio.sleep(0.05)


async def _whole(cluster: Cluster) -> None:
    """Until both brokers are in the master's in-sync set again, as etcd records it: the next round's fault may then
    take either (RuntimeError after RESUME_GIVE_UP_S)."""
    deadline = time.monotonic() + RESUME_GIVE_UP_S
    while True:
        try:
            view = await cluster.controller_view()
            names = view["broker_names"]
            if names and len(names[0]["assignment"]["in_sync"]) == len(BROKERS):
                return
        except (RuntimeError, KeyError, TypeError, httpx.HTTPError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the in-sync set was not whole again {RESUME_GIVE_UP_S:.0f} s after the heal")
        await asyncio.sleep(0.1)


async def read_back(gateway: httpx.AsyncClient) -> list[Stored]:
    """Every message of the topic, each queue pulled through the gateway from offset 0 to its end."""
    stored: list[Stored] = []
    for queue in range(QUEUES):
        offset, deadline = 0, time.monotonic() + READ_BACK_GIVE_UP_S
        while True:
            try:
                answer = await gateway.get(
                    f"/v1/topics/{TOPIC}/queues/{queue}/messages", params={"offset": offset, "max": 256}
                )
            except httpx.HTTPError:
                answer = None
            if answer is None or not answer.is_success:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"queue {queue} not read back: {answer.text if answer else 'no answer'}")
                await asyncio.sleep(0.5)
                continue
            page = answer.json()
            stored += [Stored(m["message_id"], m["body"] or "", queue, m["queue_offset"]) for m in page["messages"]]
            if not page["messages"] or page["next_offset"] >= page["max_offset"]:
                break
            offset = page["next_offset"]
    return stored


def epochs_of(cluster: Cluster) -> Epochs:
    """Each broker's epoch history (epochs.json in its store) and the epochs its log says it was master of."""
    epochs = Epochs()
    for broker in BROKERS:
        path = cluster.data_dir / "brokers" / broker / "epochs.json"
        if path.exists():
            epochs.histories[broker] = [(int(e), int(s)) for e, s in json.loads(path.read_text())]
        try:
            text = cluster.log(broker)
        except FileNotFoundError:
            text = ""
        epochs.mastered[broker] = {int(m) for m in MASTER_OF.findall(text)}
    return epochs
