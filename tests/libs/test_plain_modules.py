"""The codec's and the store's tests, run again on the plain modules (PETREL_COMPILED=off) in the same run.

The suite runs what `make run` runs: the compiled hot modules where a build of these sources exists
(libs.compiled). The plain modules stay what runs without a C compiler, so their tests run too, here,
in a pytest of their own (a process imports a module once), on a quarter of the generated inputs.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from libs import codec
from libs.compiled import ROOT, SWITCH, is_compiled
from tests.support.examples import QUICK_ENV

PLAIN_RUN = ("tests/libs/test_codec.py", "tests/libs/store")
LEFT_OUT = "tests/libs/store/test_consume_queue.py::test_ten_thousand_queues_work_within_the_open_file_limit"
"""Seven seconds of opening files, the same work compiled or not."""


@pytest.mark.timeout(600)
def test_the_codec_and_store_tests_pass_on_the_plain_modules() -> None:
    if not is_compiled(codec):
        pytest.skip("this run's modules are the plain ones already")
    env = os.environ | {SWITCH: "off", QUICK_ENV: "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n0", "-p", "no:cacheprovider", "--deselect", LEFT_OUT, *PLAIN_RUN],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert "petrel hot modules: plain modules (PETREL_COMPILED=off)" in done.stdout, done.stdout[:2000]
    assert done.returncode == 0, done.stdout[-6000:]
