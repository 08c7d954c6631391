"""One chaos run: mixed load on a real cluster while processes are killed, then the accounting.

Shared by the e2e test (tests/e2e/test_chaos.py, short) and `petrel bench chaos`
(long). The caller starts the cluster (tests.support.cluster.LocalCluster with
txcheck, under `CLUSTER_ENV`) and the check-back receiver (`checkback_receiver`);
`run_chaos` sets up the topic and groups, runs producers, consumers and the Killer
for `duration_s`, waits until every answered send is accounted for (or `quiesce_s`
passed), and returns a ChaosResult. `store_check` runs `petrel store check` on the
broker's directory once the cluster has stopped. The seed comes from
`PETREL_CHAOS_SEED` when set, so a failing run can be repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.chaos.checkback import SECRET_ENV
from bench.chaos.killer import TARGETS, Killer, Processes, schedule
from bench.chaos.ledger import Fate, Ledger, Verdict
from bench.chaos.load import GROUP_A, GROUP_B, PRODUCER_GROUP, TOPIC, Consumer, LoadShape, Producer
from bench.chaos.patient import PatientClient
from bench.loopback import served

SEED_ENV = "PETREL_CHAOS_SEED"
CLUSTER_ENV = {
    "PETREL_BROKER_FLUSH_MODE": "SYNC_FLUSH",
    "PETREL_BROKER_SEGMENT_SIZE": str(256 * 1024),
    "PETREL_BROKER_CQ_UNITS_PER_FILE": "500",
    "PETREL_BROKER_CHECKPOINT_INTERVAL_MS": "200",
    "PETREL_BROKER_OFFSET_PERSIST_INTERVAL_SECONDS": "1",
}
GROUP_CONFIG = {"max_retries": 3, "retry_policy": {"type": "exponential", "initial_ms": 300, "max_ms": 1000}}
QUEUES = 4


@dataclass(frozen=True, slots=True)
class ChaosConfig:
    seed: int
    duration_s: float = 25.0
    kills: int = 5
    quiesce_s: float = 45.0
    shape: LoadShape = field(default_factory=LoadShape)
    targets: tuple[str, ...] = TARGETS
    """the processes killed (a colocated cluster's broker is its gateway too: TARGETS without the gateway)"""


@dataclass(slots=True)
class ChaosResult:
    config: ChaosConfig
    ledger: Ledger
    verdict: Verdict
    killer_failure: str | None
    last_errors: dict[str, str]
    gave_up: dict[str, int]
    seconds: dict[str, float]
    started_at: float
    store_check: tuple[int, str] | None = None

    @property
    def ok(self) -> bool:
        store_clean = self.store_check is None or self.store_check[0] == 0
        return self.verdict.ok and self.killer_failure is None and store_clean

    def report(self) -> str:
        lines = [
            f"chaos run, seed {self.config.seed} (repeat it with {SEED_ENV}={self.config.seed}), "
            f"load from {self.started_at:.3f} (epoch s)"
        ]
        lines += [f"  {name:36} {value:>8,}" for name, value in self.verdict.figures.items()]
        lines += [f"  {name:36} {value:>8.1f} s" for name, value in self.seconds.items()]
        lines += [f"  duplicates, {why}: {n}" for why, n in sorted(self.verdict.explained.items())]
        lines += [
            f"  kill -9 {k.process} at +{k.killed_at - self.started_at:.1f} s ({k.killed_at:.3f}), "
            f"back after {k.restarted_at - k.killed_at:.1f} s"
            for k in self.ledger.kills
        ]
        if self.killer_failure:
            lines.append(f"FAILED: {self.killer_failure}")
        if self.store_check is not None and self.store_check[0] != 0:
            lines.append(f"FAILED: petrel store check exited {self.store_check[0]}:\n{self.store_check[1][-3000:]}")
        lines += [f"FAILED: {f}" for f in self.verdict.failures[:40]]
        lines += [f"  unanswered after retrying, {why}: {n}" for why, n in sorted(self.gave_up.items())]
        lines += [f"  last failure of {op}: {error[:300]}" for op, error in sorted(self.last_errors.items())]
        if not self.ok:
            lines.append(f"seed {self.config.seed}: {SEED_ENV}={self.config.seed} repeats this run")
        return "\n".join(lines)


def seed_from_env() -> int:
    given = os.environ.get(SEED_ENV)
    return int(given) if given else random.SystemRandom().randrange(1, 2**31)


@contextlib.contextmanager
def checkback_receiver(secret: str) -> Iterator[str]:
    """The check-back receiver in a child process; yields its URL."""
    os.environ[SECRET_ENV] = secret
    with served("bench.chaos.checkback:receiver_app") as port:
        yield f"http://127.0.0.1:{port}/checkback"


async def run_chaos(
    processes: Processes, client: httpx.AsyncClient, config: ChaosConfig, checkback_url: str, secret: str
) -> ChaosResult:
    ledger = Ledger((GROUP_A, GROUP_B), {GROUP_B: Fate.POISON})
    api = PatientClient(client, ledger.operations)
    await _set_up(api, checkback_url, secret)
    started = time.time()
    stop_load, stop_consumers = asyncio.Event(), asyncio.Event()
    consumers = [
        asyncio.create_task(Consumer(api, ledger, group, config.shape).run(stop_consumers))
        for group in (GROUP_A, GROUP_B)
        for _ in range(config.shape.consumers_per_group)
    ]
    producers = [
        asyncio.create_task(
            Producer(api, ledger, random.Random(f"{config.seed}:producer:{n}"), config.shape).run(stop_load)
        )
        for n in range(config.shape.producers)
    ]
    killer = Killer(processes, ledger, schedule(config.seed, config.duration_s, config.kills, config.targets))
    killing = asyncio.create_task(killer.run())
    await asyncio.sleep(config.duration_s)
    stop_load.set()
    await asyncio.gather(*producers)
    await killing
    loaded = time.time()
    dead, tx_states = await _quiesce(api, ledger, config.quiesce_s)
    stop_consumers.set()
    await asyncio.gather(*consumers)
    seconds = {"load": loaded - started, "quiescence": time.time() - loaded}
    verdict = ledger.verdict({g: dict(entries) for g, entries in dead.items()}, tx_states)
    for group, entries in dead.items():
        verdict.figures[f"{group}: DLQ entries, copies included"] = len(entries)
    return ChaosResult(
        config, ledger, verdict, killer.failure, dict(api.last_errors), dict(api.gave_up), seconds, started
    )


async def _set_up(api: PatientClient, checkback_url: str, secret: str) -> None:
    calls = [
        ("PUT", f"/v1/topics/{TOPIC}", {"queues": QUEUES}),
        ("PUT", f"/v1/groups/{GROUP_A}", GROUP_CONFIG),
        ("PUT", f"/v1/groups/{GROUP_B}", GROUP_CONFIG),
        ("PUT", f"/v1/producer-groups/{PRODUCER_GROUP}", {"checkback_url": checkback_url, "signing_secret": secret}),
    ]
    for method, path, body in calls:
        answer = await api.call("set up", method, path, json=body, give_up_s=30)
        if answer is None or not answer.is_success:
            raise RuntimeError(f"{method} {path}: {api.last_errors.get('set up') if answer is None else answer.text}")


async def _quiesce(
    api: PatientClient, ledger: Ledger, timeout_s: float
) -> tuple[dict[str, list[tuple[str, str]]], dict[str, str]]:
    """Until every answered send is accounted for in both groups and nothing is left in flight (or timeout)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    tx_states: dict[str, str] = {}
    while True:
        dead = {group: await dead_letters(api, group) for group in ledger.groups}
        await _transaction_states(api, ledger, tx_states)
        settled = all(not ledger.unaccounted(g, dict(dead[g])) for g in ledger.groups)
        if settled and all([await _idle(api, g) for g in ledger.groups]):
            return dead, tx_states
        if asyncio.get_running_loop().time() > deadline:
            return dead, tx_states
        await asyncio.sleep(1.0)


async def dead_letters(api: PatientClient, group: str) -> list[tuple[str, str]]:
    """The group's DLQ entries, copies of one message included: (message id, reason)."""
    found: list[tuple[str, str]] = []
    offset = 0
    while True:
        answer = await api.call("dlq", "GET", f"/v1/groups/{group}/dlq?offset={offset}&max=256", give_up_s=10)
        if answer is None or not answer.is_success:
            return found
        page = answer.json()
        found += [(m["message_id"], m.get("reason") or "") for m in page["messages"]]
        queues = page["queues"]
        if not queues or queues[0]["next_offset"] >= queues[0]["max_offset"] or not page["messages"]:
            return found
        offset = queues[0]["next_offset"]


async def _transaction_states(api: PatientClient, ledger: Ledger, states: dict[str, str]) -> None:
    for sent in ledger.sent.values():
        tid = sent.transaction_id
        if tid is None or states.get(tid) in ("COMMITTED", "ROLLED_BACK"):
            continue
        answer = await api.call("transaction state", "GET", f"/v1/transactions/{tid}", give_up_s=5)
        states[tid] = answer.json()["state"] if answer is not None and answer.is_success else "no answer"


async def _idle(api: PatientClient, group: str) -> bool:
    answer = await api.call("lag", "GET", f"/v1/groups/{group}/lag", give_up_s=5)
    if answer is None or not answer.is_success:
        return False
    lag = answer.json()
    return bool(lag["total_lag"] == 0 and lag["total_in_flight"] == 0)


def store_check(store_dir: Path) -> tuple[int, str]:
    """`petrel store check` on a broker's directory: (exit code, its output)."""
    done = subprocess.run(
        [sys.executable, "-m", "deploy", "store", "check", str(store_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


REPLICATED_BROKERS = ("broker-a", "broker-a@1")
"""The chaos cluster's broker-a and its slave (tests.support.cluster.LocalCluster, replicated)."""


def store_checks(data_dir: Path) -> tuple[int, str]:
    """`store_check` of both brokers of the replicated chaos cluster: the worse exit code, both outputs."""
    checks = [store_check(data_dir / "brokers" / name) for name in REPLICATED_BROKERS]
    outputs = "\n".join(f"{name}: {out}" for name, (_, out) in zip(REPLICATED_BROKERS, checks, strict=True))
    return max(code for code, _ in checks), outputs
