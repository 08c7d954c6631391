"""The live cluster the e2e tests that kill nothing share: one per test worker, started when a test first needs it.

A test that only sends and reads runs on it, under names of its own (`unique`), so that
no other test's messages, groups or subscriptions meet its own. A test that kills,
partitions or restarts a process starts a cluster of its own (tests.support.cluster).
The push service and txcheck's worker and beat join the shared cluster the first time a
test asks for them (`shared_push`, `shared_txcheck`): a worker that runs no such test
never starts them.

The core tests (send, receive, ack, retries, transactions) take `core_cluster` or
`core_gateway` instead: they run twice, on the shared cluster and on a shared colocated
one (`petrel serve gateway --colocated`: the gateway and broker-a in one process).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest

from tests.support.cluster import FAST_RETRY_LEVELS, QUICK_CIRCUIT, LocalCluster
from tests.support.waiting import wait_until

CORE = ("nameserver", "broker-a", "timer", "gateway")


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The worker's shared cluster, with a cluster token, short retry levels and a quick push circuit (its core
    processes running; see `shared_push`)."""
    yield from _shared(tmp_path_factory, "shared-cluster", colocated=False)


@pytest.fixture(scope="session")
def colocated_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The worker's shared cluster as `shared_cluster`, but for the gateway and broker-a: one process."""
    yield from _shared(tmp_path_factory, "colocated-cluster", colocated=True)


def _shared(factory: pytest.TempPathFactory, name: str, *, colocated: bool) -> Iterator[LocalCluster]:
    data_dir = factory.mktemp(name) / "data"
    env = FAST_RETRY_LEVELS | QUICK_CIRCUIT
    cluster = LocalCluster(data_dir, env, push=True, txcheck=True, token=True, colocated=colocated)
    try:
        cluster.start_now(*CORE)
        yield cluster
    finally:
        cluster.stop()


LOG_LINES_ON_FAILURE = 60
"""Of each core process's log, added to a failed core test's report (the timer's, say, when a retry came late)."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A core test that failed carries the last lines of its cluster's logs: the shared clusters outlive the run's
    temporary files only until the run ends, and a flaky failure is seldom seen twice."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    cluster = getattr(item, "funcargs", {}).get("core_cluster")
    if report.when != "call" or not report.failed or not isinstance(cluster, LocalCluster):
        return
    for name in dict.fromkeys(cluster.name_of(n) for n in ("timer", "gateway", "broker-a", "nameserver")):
        report.sections.append((f"{name} log, last {LOG_LINES_ON_FAILURE} lines", log_tail(cluster, name)))


def log_tail(cluster: LocalCluster, name: str) -> str:
    try:
        return "\n".join(cluster.log(name).splitlines()[-LOG_LINES_ON_FAILURE:])
    except OSError as exc:
        return f"(no log: {exc})"


@pytest.fixture(params=["separate", "colocated"])
def core_cluster(request: pytest.FixtureRequest) -> LocalCluster:
    """The shared cluster, then the shared colocated one: a core test runs on both."""
    cluster: LocalCluster = request.getfixturevalue(
        f"{'shared' if request.param == 'separate' else 'colocated'}_cluster"
    )
    return cluster


@pytest.fixture
async def core_gateway(core_cluster: LocalCluster) -> AsyncIterator[httpx.AsyncClient]:
    """A client of `core_cluster`'s gateway."""
    async with httpx.AsyncClient(base_url=core_cluster.url, timeout=15) as client:
        yield client


@pytest.fixture
def shared_push(shared_cluster: LocalCluster) -> LocalCluster:
    """The shared cluster with its push service running."""
    shared_cluster.start_now("push")
    return shared_cluster


@pytest.fixture
def shared_txcheck(shared_cluster: LocalCluster) -> LocalCluster:
    """The shared cluster with txcheck's worker and beat running (on the real Redis, under the cluster's prefix),
    the worker ready for tasks (it serves no port to ask: its log says so)."""
    return with_txcheck(shared_cluster)


@pytest.fixture
def core_txcheck(core_cluster: LocalCluster) -> LocalCluster:
    """`core_cluster` with txcheck's worker and beat running, as `shared_txcheck`."""
    return with_txcheck(core_cluster)


def with_txcheck(cluster: LocalCluster) -> LocalCluster:
    cluster.start_now("txcheck-worker", "txcheck-beat")
    wait_until(
        lambda: " ready." in cluster.log("txcheck-worker"),
        "txcheck's Celery worker ready",
        timeout=60,
        context=lambda: cluster.log("txcheck-worker")[-3000:],
    )
    return cluster


@pytest.fixture
async def shared_gateway(shared_cluster: LocalCluster) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the shared cluster's gateway."""
    async with httpx.AsyncClient(base_url=shared_cluster.url, timeout=15) as client:
        yield client


@pytest.fixture
def unique() -> Callable[[str], str]:
    """This test's own names in the shared cluster: `unique("orders")` is "orders-<6 hex digits>", the same digits
    for every name of one test."""
    suffix = uuid.uuid4().hex[:6]
    return lambda name: f"{name}-{suffix}"
