"""Every shell block of the README and docs/ runs as written against a live cluster, page by page.

Each page gets a fresh cluster (real processes, as the other e2e tests start them; txcheck
too when the page shows check-backs) and runs its blocks in order in one bash session.
A failure names the page, the block and its output. Blocks that must not run (installing,
`make run` itself) are fenced ```sh skip or follow a `<!-- not-run -->` line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.cluster import local_cluster, local_cluster_with_push, local_cluster_with_txcheck
from tests.support.doc_blocks import run_page, shell_blocks
from tests.support.serving import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
PAGE_TIMEOUT_SECONDS = 240
"""A bound for a hung page, not a speed target: docs/etl.md starts two Spark JVMs, a minute each under load."""


def shell_env() -> dict[str, str]:
    """The test's environment without PETREL_* settings, with this venv's `petrel` first on the PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PETREL_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.mark.timeout(PAGE_TIMEOUT_SECONDS + 60)  # the page's own bound fails first, naming the block
@pytest.mark.parametrize("page", [p for p in PAGES if shell_blocks(ROOT / p, p)])
async def test_the_pages_shell_blocks_run_as_written(page: str, tmp_path: Path) -> None:
    blocks = shell_blocks(ROOT / page, page)
    with_txcheck = any("checkback-receiver" in b.text for b in blocks)
    with_push = any("webhook-receiver" in b.text for b in blocks)
    starting = local_cluster_with_txcheck if with_txcheck else local_cluster_with_push if with_push else local_cluster
    async with starting(tmp_path / "data") as (cluster, _):
        ports = {
            8080: cluster.specs["gateway"].port,
            9876: cluster.specs["nameserver"].port,
            10911: cluster.specs["broker-a"].port,
            10931: cluster.specs["timer"].port,
            9000: free_port(),
        }
        result = run_page(blocks, ports, tmp_path, shell_env(), PAGE_TIMEOUT_SECONDS)
    failure = result.failure()
    assert failure is None, failure
    assert [r.block.number for r in result.runs] == [b.number for b in blocks], f"{page}: not every block ran"
