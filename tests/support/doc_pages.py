"""A page of the README or docs/ run against a fresh cluster of its own (tests.support.doc_blocks runs the blocks).

The cluster has txcheck when the page shows check-backs, the push service when it shows
a webhook receiver, and a cluster token in `data/cluster.token` as `petrel up` makes one;
the page's `petrel` is this venv's.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from tests.support.cluster import LocalCluster, started
from tests.support.doc_blocks import run_page, shell_blocks
from tests.support.serving import free_port

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
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


async def run_page_as_written(
    page: str, tmp_path: Path, env: dict[str, str] | None = None, timeout: float = PAGE_TIMEOUT_SECONDS
) -> None:
    """Run the page's blocks in order on a fresh cluster (`env` added to their shell's); fail naming the block
    and its output."""
    blocks = shell_blocks(ROOT / page, page)
    with_txcheck = any("checkback-receiver" in b.text for b in blocks)
    with_push = any("webhook-receiver" in b.text for b in blocks)
    settings = dict(CLUSTER_SETTINGS.findall((ROOT / page).read_text()))
    replicated = REPLICATED_MARK in (ROOT / page).read_text()
    cluster = LocalCluster(
        tmp_path / "data", settings, txcheck=with_txcheck, push=with_push, token=True, replicated=replicated
    )
    async with started(cluster):
        ports = {
            8080: cluster.specs["gateway"].port,
            9876: cluster.specs["nameserver"].port,
            10911: cluster.specs["broker-a"].port,
            10931: cluster.specs["timer"].port,
            9000: free_port(),
        } | ({10912: cluster.specs["broker-a@1"].port} if replicated else {})
        result = run_page(blocks, ports, tmp_path, shell_env() | (env or {}), timeout)
    failure = result.failure()
    assert failure is None, failure
    assert [r.block.number for r in result.runs] == [b.number for b in blocks], f"{page}: not every block ran"
