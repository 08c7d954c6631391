"""A master and its slave as the replication scenario sees them, and the slave's lag sampled during a load.

The lag is the master's word (`GET /internal/replication`, with the cluster token):
for each slave, how many bytes of the master's CommitLog it has not confirmed
(`lag_bytes`) and how long ago the first of them was stored (`lag_ms`). A
`LagSampler` asks every `interval` seconds (50 ms), in a thread of its own so
that the load process it runs beside is not held up, and keeps every answer;
`LagSummary` is their percentiles. A SYNC_MASTER's puts wait only for slaves in
its in-sync set: a sample that finds the slave out of it is counted, as a
figure measured without the wait would not be what it says.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from bench.scheduled import percentile

STATUS_PATH = "/internal/replication"
INTERVAL = 0.05


@dataclass(frozen=True, slots=True)
class Replicas:
    """A broker name's master and one slave, by base URL, and what an internal call carries."""

    master: str
    slave: str
    headers: dict[str, str]
    slave_id: int = 1

    def status(self, url: str, **params: int) -> dict[str, Any]:
        """A broker's replication status (the master's, or the slave's when `url` is the slave's)."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        request = urllib.request.Request(f"{url}{STATUS_PATH}{query}", headers=self.headers)
        with urllib.request.urlopen(request, timeout=70) as response:
            status: dict[str, Any] = json.loads(response.read())
        return status

    def wait_in_sync(self, timeout: float = 60.0) -> None:
        """Return once the slave is in the master's in-sync set (it has caught up and confirms what it copies)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status(self.master, in_sync=self.slave_id, wait_ms=5_000)
            if self.slave_id in status["in_sync"]:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"slave {self.slave_id} not in sync after {timeout:.0f} s: {status}")

    def wait_caught_up(self, timeout: float = 60.0) -> None:
        """Return once the master says the slave has all of its log (after a load, an ASYNC slave may be behind)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status(self.master)
            lag = slave_lag(status, self.slave_id)
            if lag is not None and lag.lag_bytes == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"slave {self.slave_id} still behind after {timeout:.0f} s: {status}")
            time.sleep(INTERVAL)


@dataclass(frozen=True, slots=True)
class LagSample:
    lag_bytes: int
    lag_ms: int | None
    """None: the master could not tell (the record the slave lacks is no longer readable there)"""
    in_sync: bool


def slave_lag(status: dict[str, Any], slave_id: int) -> LagSample | None:
    """Slave `slave_id`'s lag in a master's status; None when the master has not heard from it."""
    for slave in status.get("slaves", []):
        if slave["slave_id"] == slave_id:
            return LagSample(slave["lag_bytes"], slave.get("lag_ms"), bool(slave["in_sync"]))
    return None


@dataclass(frozen=True, slots=True)
class LagSummary:
    samples: int
    p50_bytes: float
    p99_bytes: float
    max_bytes: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    out_of_sync: int
    """samples that found the slave out of the master's in-sync set"""
    failures: int
    """samples the master did not answer, or that did not list the slave"""
    ms_unknown: int
    """samples whose lag in ms the master could not tell (left out of the ms percentiles)"""

    @classmethod
    def of(cls, samples: list[LagSample], failures: int) -> LagSummary:
        if not samples:
            raise RuntimeError(f"no replication lag sample was taken ({failures} failed)")
        sizes = [float(s.lag_bytes) for s in samples]
        ages = [float(s.lag_ms) for s in samples if s.lag_ms is not None]
        return cls(
            samples=len(samples),
            p50_bytes=percentile(sizes, 0.5),
            p99_bytes=percentile(sizes, 0.99),
            max_bytes=max(sizes),
            p50_ms=percentile(ages, 0.5),
            p99_ms=percentile(ages, 0.99),
            max_ms=max(ages, default=float("nan")),
            out_of_sync=sum(not s.in_sync for s in samples),
            failures=failures,
            ms_unknown=len(sizes) - len(ages),
        )

    def line(self) -> str:
        return (
            f"{self.samples} samples: p50 {self.p50_bytes:,.0f} B / {self.p50_ms:.0f} ms, "
            f"p99 {self.p99_bytes:,.0f} B / {self.p99_ms:.0f} ms, max {self.max_bytes:,.0f} B / {self.max_ms:.0f} ms"
            f"; out of sync in {self.out_of_sync}, failed {self.failures}, ms unknown in {self.ms_unknown}"
        )


@dataclass(slots=True)
class LagSampler:
    """`with LagSampler(replicas, after=warmup):` samples the slave's lag from `after` s on until the block ends."""

    replicas: Replicas
    after: float = 0.0
    interval: float = INTERVAL
    samples: list[LagSample] = field(default_factory=list)
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> LagSampler:
        self._thread = threading.Thread(target=self._run, name="replication-lag", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def summary(self) -> LagSummary:
        return LagSummary.of(self.samples, self.failures)

    def _run(self) -> None:
        if self._stop.wait(self.after):
            return
        due = time.monotonic()
        while not self._stop.is_set():
            self._sample()
            due = max(due + self.interval, time.monotonic())  # behind (a slow answer): the next one at once
            self._stop.wait(max(0.0, due - time.monotonic()))

    def _sample(self) -> None:
        try:
            sample = slave_lag(self.replicas.status(self.replicas.master), self.replicas.slave_id)
        except OSError:
            sample = None
        if sample is None:
            self.failures += 1
        else:
            self.samples.append(sample)
