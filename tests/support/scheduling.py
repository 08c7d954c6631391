"""How `make test` (`pytest -n 3 --dist loadfile`) hands test files to its workers: loadfile, heavy files spread.

loadfile keeps each file on one worker (module-scoped clusters and the ETL session fixtures need that) and
refills a worker whenever it has two tests or fewer left: a file of one long test (docs/etl.md's page) or a few
(the nightly run) lets the same worker take the next file in the queue, so three Spark-heavy files could
queue on one worker while the other ran the quick ones. Here the known-heavy files (HEAVY_FILES, rough
seconds on an idle machine) are shared out first, heaviest first, each to the worker with the least heavy
work so far; a worker runs its own heavy files before anything else, then the other files in loadfile's order,
and takes another worker's heavy file only when nothing else is left. Files that share a costly session fixture
(TOGETHER) go to one worker as one unit, so that the fixture is made once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

HEAVY_FILES = {
    "tests/docs/test_spark_pages.py": 120,  # docs/etl.md: three Spark JVMs beside a cluster
    "tests/services/etl/test_daily_job.py": 110,  # the story's days, the nightly task on a standalone cluster
    "tests/services/etl/test_bench_reference.py": 50,
    "tests/services/etl/test_report.py": 45,
    "tests/services/etl/test_live_story.py": 45,
    "tests/e2e/test_chaos.py": 60,
    "tests/e2e/test_nemesis.py": 40,  # two nemesis rounds on a replicated cluster with three etcd members
    "tests/e2e/test_replication.py": 45,
    "tests/e2e/test_failover.py": 45,
    # the longest files of `make test-fast`, so that none of them starts last
    "tests/gateway/test_fuzz_spec.py": 15,
    "tests/gateway/test_consume.py": 13,
    "tests/gateway/test_messages.py": 11,
    "tests/deploy/test_serve.py": 9,
    "tests/gateway/test_flush_timeout.py": 9,
    "tests/gateway/test_transactions.py": 8,
}
"""Files whose first minutes go to starting Spark or clusters. A file missing here only runs in loadfile's
order; the weights only order the heavy ones among themselves."""


TOGETHER = ["tests/services/etl/"]
"""Folders whose files share a worker's costly session fixtures: tests/services/etl/conftest.py's Spark session
(a JVM, about 12 s to start and 15 s more to warm up in its first job) and the story's runs (about 45 s). All on
one worker, each is made once. A folder's files are one unit: their weights add up, a light file weighs nothing."""


def share_heavy_files(
    files: Iterable[str],
    workers: int,
    heavy: dict[str, int] = HEAVY_FILES,
    together: Sequence[str] = TOGETHER,
) -> dict[str, int]:
    """Which worker (0..workers-1) runs each heavy file of `files` (and each file of a `together` folder), heaviest
    unit first (the order of the answer), each to the worker with the least heavy work so far."""
    present = sorted(set(files))
    units: list[list[str]] = [[f for f in present if f.startswith(folder)] for folder in together]
    units = [u for u in units if any(f in heavy for f in u)]
    grouped = {f for u in units for f in u}
    units += [[f] for f in present if f in heavy and f not in grouped]
    loads = [0] * workers
    owners: dict[str, int] = {}
    for unit in sorted(units, key=lambda u: (-sum(heavy.get(f, 0) for f in u), u[0])):
        worker = loads.index(min(loads))
        for file in sorted(unit, key=lambda f: (-heavy.get(f, 0), f)):
            owners[file] = worker
        loads[worker] += sum(heavy.get(f, 0) for f in unit)
    return owners


def next_file(queue: Sequence[str], owners: dict[str, int], worker: int) -> str:
    """The file `worker` takes next from `queue` (files not yet handed out, in loadfile's order): its own heavy
    files heaviest first, then the light ones in the queue's order."""
    own = [f for f, owner in owners.items() if owner == worker and f in queue]
    light = [f for f in queue if f not in owners]
    return (own or light or list(queue))[0]  # lastly another worker's heavy file: better started than waiting


class HeavyFirstFileScheduling(LoadFileScheduling):  # type: ignore[misc]  # xdist is untyped
    """loadfile's units and refills, with the heavy files shared out first (share_heavy_files, next_file)."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self.owners: dict[str, int] | None = None

    def _assign_work_unit(self, node: Any) -> None:
        nodes = list(self.assigned_work)
        if self.owners is None:  # the first hand-out: the collection is complete, the queue full
            self.owners = share_heavy_files(self.workqueue, len(nodes))
        worker = nodes.index(node) if node in nodes else 0
        self.workqueue.move_to_end(next_file(list(self.workqueue), self.owners, worker), last=False)
        super()._assign_work_unit(node)
