"""Every shell block of the README and docs/ runs as written against a live cluster, page by page.

The README and the pages run in the README's order on one cluster, as a reader runs them on
the cluster `make run` started: each page's names are its own, so each shows what it says
whatever the pages before it did (tests.support.doc_pages). A page that needs another
cluster runs on a fresh one of its own, the reason named in its test's id: docs/security.md
needs `PETREL_AUTH=required`, docs/replication.md a replicated broker whose master it kills.
A page's blocks run in order in one bash session. A failure names the page, the block and
its output. Blocks that must not run (installing, `make run` itself) are fenced ```sh skip
or follow a `<!-- not-run -->` line. The pages that start Spark run in
tests/docs/test_spark_pages.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import LocalCluster
from tests.support.doc_pages import (
    PAGE_TIMEOUT_SECONDS,
    PAGES,
    SPARK_PAGES,
    docs_cluster,
    own_cluster,
    pages_with_blocks,
    run_page_as_written,
    run_page_on_shared_cluster,
)

pytestmark = pytest.mark.e2e

RUNNABLE = pages_with_blocks([p for p in PAGES if p not in SPARK_PAGES])
SHARED = [p for p in RUNNABLE if own_cluster(p) is None]
"""In the README's order: the order of the tests in this module, as pytest runs them."""
OWN = {p: reason for p in RUNNABLE if (reason := own_cluster(p)) is not None}


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = docs_cluster(tmp_path_factory.mktemp("docs") / "data")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.timeout(PAGE_TIMEOUT_SECONDS + 120)  # the page's own bound fails first; the first starts the cluster
@pytest.mark.parametrize("page", SHARED)
def test_the_pages_run_in_the_readmes_order_on_one_cluster(page: str, shared_cluster: LocalCluster) -> None:
    run_page_on_shared_cluster(shared_cluster, page)


@pytest.mark.timeout(PAGE_TIMEOUT_SECONDS + 60)  # the page's own bound fails first, naming the block
@pytest.mark.parametrize("page", [pytest.param(p, id=f"{p}: {reason}") for p, reason in OWN.items()])
async def test_a_page_that_needs_another_cluster_runs_on_its_own(page: str, tmp_path: Path) -> None:
    await run_page_as_written(page, tmp_path)
