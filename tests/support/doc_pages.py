"""The README and docs/ pages run against live clusters (tests.support.doc_blocks runs the blocks).

The pages run in the README's order on one cluster (`docs_cluster`, with txcheck and the push
service started when a page first shows check-backs or a webhook receiver), as a reader runs
them one after another on the cluster `make run` started: each page uses names of its own,
so what an earlier page did never changes what a later one shows. A page runs on a fresh
cluster of its own only when it needs another cluster (`own_cluster` says why): settings of
its own (`<!-- cluster: PETREL_AUTH=required -->`) or a replicated broker it kills. Every
cluster has a cluster token in `data/cluster.token` as `petrel up` makes one; the page's
`petrel` is this venv's.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from tests.support.cluster import LocalCluster, started
from tests.support.doc_blocks import ShellBlock, run_page, shell_blocks
from tests.support.serving import free_port
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


def readme_order() -> list[str]:
    """The README, then the pages its "Read on" list links, in its order, then any other page of docs/."""
    readme = (ROOT / "README.md").read_text()
    read_on = readme[readme.index("## Read on") :]
    linked = list(dict.fromkeys(re.findall(r"\]\((docs/[\w.-]+\.md)\)", read_on)))
    others = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md") if str(p.relative_to(ROOT)) not in linked
    )
    return ["README.md", *linked, *others]


PAGES = readme_order()
PAGE_TIMEOUT_SECONDS = 240
"""A bound for a hung page, not a speed target: docs/etl.md starts three Spark JVMs, a minute each under load."""
CLUSTER_SETTINGS = re.compile(r"<!-- cluster: (PETREL_\w+)=(\S+) -->")
"""A page that needs its cluster set otherwise says so, e.g. `<!-- cluster: PETREL_AUTH=required -->`."""
SPARK_PAGE_TIMEOUT_SECONDS = 720
"""The bound of a page that starts Spark (its JVMs in one bound): docs/etl.md took about 2 min on an idle machine
with three JVMs (two since `petrel etl report` reads with pyarrow); under a 0.5-core quota beside other load it
passed 480 s in its last block."""
SPARK_PAGES = ["docs/etl.md"]
"""Pages that start Spark: a test module of their own, so the suite's workers can run them beside the others."""


def shell_env() -> dict[str, str]:
    """The test's environment without PETREL_* settings, with this venv's `petrel` first on the PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PETREL_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def pages_with_blocks(pages: list[str]) -> list[str]:
    return [p for p in pages if shell_blocks(ROOT / p, p)]


REPLICATED_MARK = "<!-- replicated cluster -->"
"""A page that holds it runs on a cluster whose broker-a has a slave under the controller (on port 10912)."""


def own_cluster(page: str) -> str | None:
    """Why the page needs a fresh cluster of its own; None when it runs on the pages' shared one."""
    text = (ROOT / page).read_text()
    if REPLICATED_MARK in text:
        return "a replicated broker-a, whose master it kills"
    if settings := CLUSTER_SETTINGS.findall(text):
        return "settings of its own: " + ", ".join(f"{name}={value}" for name, value in settings)
    return None


def needs(blocks: list[ShellBlock]) -> tuple[bool, bool]:
    """Whether the page shows check-backs (txcheck) and a webhook receiver (the push service)."""
    return any("checkback-receiver" in b.text for b in blocks), any("webhook-receiver" in b.text for b in blocks)


CORE = ("nameserver", "broker-a", "timer", "gateway")


def docs_cluster(data_dir: Path) -> LocalCluster:
    """The cluster the pages share, its core processes started (txcheck and push start when a page needs them)."""
    cluster = LocalCluster(data_dir, {}, txcheck=True, push=True, token=True)
    cluster.start_now(*CORE)
    return cluster


def run_page_on_shared_cluster(cluster: LocalCluster, page: str) -> None:
    """Run the page's blocks in order on the pages' shared cluster, in the directory that holds its `data/`."""
    blocks = shell_blocks(ROOT / page, page)
    with_txcheck, with_push = needs(blocks)
    if with_push:
        cluster.start_now("push")
    if with_txcheck:
        cluster.start_now("txcheck-worker", "txcheck-beat")
        wait_until(
            lambda: " ready." in cluster.log("txcheck-worker"),
            "txcheck's Celery worker ready",
            timeout=60,
            context=lambda: cluster.log("txcheck-worker")[-3000:],
        )
    _run(page, blocks, cluster, cluster.data_dir.parent, shell_env(), PAGE_TIMEOUT_SECONDS)


async def run_page_as_written(
    page: str, tmp_path: Path, env: dict[str, str] | None = None, timeout: float = PAGE_TIMEOUT_SECONDS
) -> None:
    """Run the page's blocks in order on a fresh cluster of its own (`env` added to their shell's); fail naming the
    block and its output."""
    blocks = shell_blocks(ROOT / page, page)
    with_txcheck, with_push = needs(blocks)
    settings = dict(CLUSTER_SETTINGS.findall((ROOT / page).read_text()))
    replicated = REPLICATED_MARK in (ROOT / page).read_text()
    cluster = LocalCluster(
        tmp_path / "data", settings, txcheck=with_txcheck, push=with_push, token=True, replicated=replicated
    )
    async with started(cluster):
        _run(page, blocks, cluster, tmp_path, shell_env() | (env or {}), timeout)


def _run(
    page: str, blocks: list[ShellBlock], cluster: LocalCluster, cwd: Path, env: dict[str, str], timeout: float
) -> None:
    ports = {
        8080: cluster.specs["gateway"].port,
        9876: cluster.specs["nameserver"].port,
        10911: cluster.specs["broker-a"].port,
        10931: cluster.specs["timer"].port,
        9000: free_port(),
    } | ({10912: cluster.specs["broker-a@1"].port} if cluster.replicated else {})
    result = run_page(blocks, ports, cwd, env, timeout)
    failure = result.failure()
    assert failure is None, failure
    assert [r.block.number for r in result.runs] == [b.number for b in blocks], f"{page}: not every block ran"
