"""`make test`'s two workers get the heavy test files alternately and first, each file whole on one worker, the
files sharing the ETL tests' Spark session on one (tests.support.scheduling), shown on a made-up collection with
stand-in workers."""

from __future__ import annotations

from types import SimpleNamespace

from tests.support.scheduling import HeavyFirstFileScheduling, next_file, share_heavy_files

COLLECTION = [
    "tests/libs/test_store.py::test_append",
    "tests/libs/test_store.py::test_read",
    "tests/libs/test_store.py::test_scan",
    "tests/libs/test_store.py::test_trim",
    "tests/docs/test_spark_pages.py::test_the_spark_pages_shell_blocks_run_as_written[docs/etl.md]",
    "tests/services/etl/test_cli.py::test_petrel_etl_daily_reruns",
    "tests/services/etl/test_nightly.py::test_yesterday",
    "tests/services/etl/test_daily_job.py::test_topic_hourly",
    "tests/services/etl/test_daily_job.py::test_group_hourly",
    "tests/services/etl/test_daily_job.py::test_a_rerun",
    "tests/services/etl/test_daily_job.py::test_an_empty_day",
    "tests/gateway/test_routes.py::test_get",
    "tests/gateway/test_routes.py::test_post",
    "tests/services/etl/test_report.py::test_the_page",
]


class Worker:
    """Stands in for xdist's WorkerController: records the collection indexes it is sent."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent += indexes

    def shutdown(self) -> None:
        self.shutting_down = True

    def files(self) -> list[str]:
        """The files sent, in the order first sent."""
        return list(dict.fromkeys(COLLECTION[i].split("::")[0] for i in self.sent))


def started(workers: list[Worker]) -> HeavyFirstFileScheduling:
    config = SimpleNamespace(getvalue=lambda name: ["popen"] * len(workers), option=SimpleNamespace())
    config.option.loadscopereorder = False
    scheduler = HeavyFirstFileScheduling(config, None)  # type: ignore[arg-type]  # what the scheduler reads
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, COLLECTION)
    scheduler.schedule()
    return scheduler


def finish_everything(scheduler: HeavyFirstFileScheduling, workers: list[Worker]) -> None:
    """Each worker in turn finishes what it was sent, as a run does, until nothing is left to hand out."""
    done: set[int] = set()
    while any(i not in done for w in workers for i in w.sent) or scheduler.workqueue:
        for worker in workers:
            pending = [i for i in worker.sent if i not in done]
            if pending:
                scheduler.mark_test_complete(worker, pending[0])
                done.add(pending[0])


def test_the_spark_heavy_files_go_first_and_alternately_and_the_etl_folder_to_one_worker() -> None:
    gw0, gw1 = Worker("gw0"), Worker("gw1")
    scheduler = started([gw0, gw1])

    story = ["tests/services/etl/test_daily_job.py", "tests/services/etl/test_report.py"]
    assert gw0.files()[0] == story[0], "the story's files, the heaviest unit, first on one worker, heaviest first"
    assert gw1.files()[0] == "tests/docs/test_spark_pages.py", "the next heaviest on the other worker"

    finish_everything(scheduler, [gw0, gw1])

    assert gw0.files()[:3] == [*story, "tests/services/etl/test_cli.py"], "then the story's others, before the rest"
    etl = {f for f in gw0.files() + gw1.files() if f.startswith("tests/services/etl/")}
    assert etl == {*story, "tests/services/etl/test_cli.py", "tests/services/etl/test_nightly.py"}
    assert not etl & set(gw1.files()), "a second Spark session, and the story made twice"
    assert not set(gw0.files()) & set(gw1.files()), "a file was split between the workers"
    assert sorted(gw0.sent + gw1.sent) == list(range(len(COLLECTION))), "each test runs once"


def test_heavy_files_are_shared_by_weight_and_the_rest_keep_loadfiles_order() -> None:
    owners = share_heavy_files(
        ["a.py", "b.py", "c.py", "d.py"], 2, heavy={"a.py": 100, "b.py": 60, "c.py": 50}, together=[]
    )

    assert owners == {"a.py": 0, "b.py": 1, "c.py": 1}
    assert next_file(["d.py", "c.py"], owners, 1) == "c.py"
    assert next_file(["d.py", "c.py"], owners, 0) == "d.py", "a light file before another worker's heavy one"
    assert next_file(["c.py"], owners, 0) == "c.py", "nothing else left: another worker's heavy file"


def test_files_together_are_one_unit_of_their_summed_weight() -> None:
    heavy = {"a.py": 100, "b.py": 60, "c.py": 50}
    files = ["a.py", "b.py", "etl/c.py", "etl/d.py", "e.py"]
    owners = share_heavy_files(files, 2, heavy=heavy | {"etl/c.py": 50}, together=["etl/"])

    assert owners == {"a.py": 0, "b.py": 1, "etl/c.py": 1, "etl/d.py": 1}, "c and d (light) weigh 50: beside b"
    assert share_heavy_files(["a.py", "etl/d.py"], 2, heavy=heavy, together=["etl/"]) == {"a.py": 0}, (
        "a folder none of whose files is heavy stays in loadfile's order"
    )
