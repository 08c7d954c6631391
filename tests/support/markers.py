"""Which tests start a JVM: the `spark` marker, so that `make test-fast` can leave them out.

A Spark test costs a JVM's start (tens of CPU-seconds) and a job's run; the developer's quick loop
(`make test-fast`, `-m "not e2e and not spark"`) skips them and `make test` runs them. The marker is given
by where a test lives, not by each module remembering it: the root conftest marks every test under
SPARK_PATHS, and tests/test_house_rules.py refuses a module elsewhere that reaches for Spark.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
SPARK_PATHS = (TESTS / "services" / "etl", TESTS / "docs" / "test_spark_pages.py")
"""The ETL job's tests (a shared local[2] session per worker, `petrel etl daily` in processes of its own, a
standalone cluster) and the pages that start Spark (docs/etl.md)."""
SPARK_IMPORTS = ("pyspark", "tests.support.spark", "tests.support.spark_standalone")
"""What a test module imports to start a JVM (besides running the Spark pages, tests.support.doc_pages.SPARK_PAGES)."""


def starts_spark(path: Path) -> bool:
    """Whether the test file at `path` is one of the Spark tests (under SPARK_PATHS)."""
    resolved = path.resolve()
    return any(resolved == place or place in resolved.parents for place in SPARK_PATHS)
