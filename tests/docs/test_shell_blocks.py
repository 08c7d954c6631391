"""Every shell block of the README and docs/ runs as written against a live cluster, page by page.

Each page gets a fresh cluster (real processes, as the other e2e tests start them; txcheck
too when the page shows check-backs, push when it shows a webhook receiver) and runs its
blocks in order in one bash session. A failure names the page, the block and its output.
Blocks that must not run (installing, `make run` itself) are fenced ```sh skip or follow a
`<!-- not-run -->` line. The pages that start Spark run in tests/docs/test_spark_pages.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_pages import PAGE_TIMEOUT_SECONDS, PAGES, SPARK_PAGES, pages_with_blocks, run_page_as_written

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(PAGE_TIMEOUT_SECONDS + 60)  # the page's own bound fails first, naming the block
@pytest.mark.parametrize("page", pages_with_blocks([p for p in PAGES if p not in SPARK_PAGES]))
async def test_the_pages_shell_blocks_run_as_written(page: str, tmp_path: Path) -> None:
    await run_page_as_written(page, tmp_path)
