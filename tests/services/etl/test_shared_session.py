"""A test that pytest-timeout stops in the middle of a Spark call leaves the worker's shared session working for the
tests after it (tests.support.spark_session_guard).

The two tests run in a pytest of their own (pytester, in this process, so on this worker's session and its py4j
connection): the first blocks a Spark task until the outer test lets it go, which it does only once the 2 s alarm
has fired, so the timeout always stops the test inside the py4j call, whatever the machine's speed.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.waiting import wait_until

INNER_CONFTEST = """
import pytest
from pyspark.sql import SparkSession

pytest_plugins = ["tests.support.spark_session_guard"]


@pytest.fixture
def spark():
    # the existing session (getActiveSession is per thread, and another test of the worker may have left it unset)
    session = SparkSession.builder.getOrCreate()
    assert session.sparkContext.applicationId == {application!r}, "not the outer test's shared session"
    return session
"""

INNER_TESTS = """
import pytest


@pytest.mark.timeout(2)
def test_a_spark_call_past_its_timeout(spark):
    release = {release!r}

    def blocked(_):
        import os, time

        deadline = time.monotonic() + 120
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)
        return 0

    spark.sparkContext.parallelize([0], 1).map(blocked).collect()


@pytest.mark.timeout(60)
def test_the_next_test_on_the_same_session(spark):
    assert spark.createDataFrame([(1, "a"), (2, "b")], "n INT, s STRING").where("n > 1").collect() == [(2, "b")]
    assert spark.range(5).count() == 5
"""


def test_a_timeout_in_the_middle_of_a_spark_call_leaves_the_shared_session_working(
    spark: SparkSession, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    pytester.makeconftest(INNER_CONFTEST.format(application=spark.sparkContext.applicationId))
    pytester.makepyfile(test_timed_out=INNER_TESTS.format(release=str(release)))
    releaser = threading.Thread(target=release_once_the_alarm_fired, args=(release,), daemon=True)
    releaser.start()
    try:
        inner = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:asyncio")
    finally:
        release.touch()
        releaser.join(10)

    inner.stdout.fnmatch_lines(["*Failed: Timeout (>2.0s) from pytest-timeout*"])
    inner.assert_outcomes(failed=1, passed=1)
    assert spark.range(3).collect() == [(0,), (1,), (2,)], "the outer test's own next call"


def release_once_the_alarm_fired(release: Path) -> None:
    """Let the blocked task end once the inner test's alarm (2 s; the outer test's is longer) went off.

    pyspark's call-site bookkeeping then waits for that job's answer on the connection the timeout cut off;
    without the release it would wait for the task's own 120 s bound.
    """
    wait_until(lambda: 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 2, "the inner test set its alarm", 300)
    wait_until(lambda: signal.getitimer(signal.ITIMER_REAL)[0] == 0, "the inner test's alarm went off", 300)
    release.touch()
