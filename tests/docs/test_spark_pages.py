"""The shell blocks of the pages that start Spark (docs/etl.md) run as written, as in test_shell_blocks.py.

A module of their own: `--dist loadfile` gives a module to one worker, and these pages
take minutes; apart, they run beside the other pages rather than after them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_pages import SPARK_PAGE_TIMEOUT_SECONDS, SPARK_PAGES, pages_with_blocks, run_page_as_written
from tests.support.spark import spark_test_env

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(SPARK_PAGE_TIMEOUT_SECONDS + 60)  # the page's own bound fails first, naming the block
@pytest.mark.parametrize("page", pages_with_blocks(SPARK_PAGES))
async def test_the_spark_pages_shell_blocks_run_as_written(page: str, tmp_path: Path) -> None:
    # the page's Spark JVMs as the tests' own
    await run_page_as_written(page, tmp_path, env=spark_test_env(), timeout=SPARK_PAGE_TIMEOUT_SECONDS)
