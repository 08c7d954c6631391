"""`petrel bench machine`: the no-op rate `.ci/run` prints beside the suite's time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ci_run_prints_the_machine_speed_beside_the_suite_time(tmp_path: Path) -> None:
    """`.ci/run` reads the rate off `petrel bench machine`'s table: a table the pattern misses prints '?'."""
    script = (REPO / ".ci" / "run").read_text()
    pattern = script.split("sed -nE '", 1)[1].split("'", 1)[0]
    bench = subprocess.run(
        [sys.executable, "-m", "bench", "machine", "--quick", "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rate = subprocess.run(["sed", "-nE", pattern], input=bench.stdout, capture_output=True, text=True, check=True)
    assert rate.stdout.strip().replace(",", "").isdigit(), f"no rate read off:\n{bench.stdout}"
    assert int(rate.stdout.strip().replace(",", "")) > 0
