"""py-spy flame graphs of every Petrel process while a load runs (`petrel bench --profile`).

One `py-spy record` per process of every cluster up (bench.cluster.clusters_up),
started when a measurement starts and stopped with SIGINT (as Ctrl-C stops it,
after which it writes its SVG) when the measurement ends; `--duration` is only a
bound in case nothing stops it. `--nonblocking` samples without pausing the
process, so a profiled load runs almost as an unprofiled one, but py-spy's own
sampling shares the two cores: a profiled run's figures are for reading the
flame graphs beside, not for quoting. A process idle throughout (txcheck's
Celery beat, say) has no samples and so no file, which is said in one line; a
profile that fails otherwise is a warning.

The files: `<profiles>/<scenario>-<measurement>-<process>.svg`; with two clusters
up at once (the gateway scenario's auth figure) the process names are numbered
by cluster (`c1-gateway`, `c2-gateway`).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bench.cluster import Cluster, clusters_up

BOUND_S = 3600
"""py-spy's --duration: far longer than a measurement, which stops it first."""
STOP_WAIT_S = 60.0
NO_SAMPLES = "No stack counts found"
"""what py-spy says of a process whose threads were all idle (it samples only busy threads)"""
IDLE = "idle"
PY_SPY = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
"""the venv's py-spy (a dev extra) beside this Python, else the one on PATH"""


def slug(text: str) -> str:
    """A name fit for a file: lower case, runs of anything but letters, digits and dots made one '-'."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def profile_path(directory: Path, scenario: str, measurement: str, process: str) -> Path:
    """Where a process's flame graph of a measurement goes; `-2`, `-3`... when a scenario repeats a measurement."""
    stem = f"{slug(scenario)}-{slug(measurement)}-{slug(process)}"
    path, n = directory / f"{stem}.svg", 1
    while path.exists():
        n += 1
        path = directory / f"{stem}-{n}.svg"
    return path


def targets(clusters: tuple[Cluster, ...]) -> dict[str, int]:
    """Every running process of `clusters` by the name its file takes: pid."""
    if len(clusters) == 1:
        return clusters[0].running_pids()
    return {f"c{n}-{name}": pid for n, c in enumerate(clusters, 1) for name, pid in c.running_pids().items()}


@dataclass(slots=True)
class Recording:
    process: str
    path: Path
    spy: subprocess.Popen[bytes]
    said: IO[bytes]
    """py-spy's stderr (a file: a pipe left unread through a long load could fill and stop it)"""


@contextlib.contextmanager
def recorded(directory: Path, scenario: str, measurement: str) -> Iterator[list[Path]]:
    """Record every process of the clusters up while the block runs; yields the SVGs that will be written."""
    clusters = clusters_up()
    if not clusters:
        yield []
        return
    directory.mkdir(parents=True, exist_ok=True)
    started = (
        _start(name, pid, profile_path(directory, scenario, measurement, name))
        for name, pid in targets(clusters).items()
    )
    recordings = [r for r in started if r is not None]
    try:
        yield [r.path for r in recordings]
    finally:
        for recording in recordings:
            recording.spy.send_signal(signal.SIGINT)
        idle = [r.process for r in recordings if _finish(r) == IDLE]
        if idle:
            print(f"  not profiled, idle throughout: {', '.join(idle)}", flush=True)


def _start(process: str, pid: int, path: Path) -> Recording | None:
    command = [PY_SPY, "record", "--nonblocking", "--pid", str(pid)]
    command += ["--duration", str(BOUND_S), "--format", "flamegraph", "-o", str(path)]
    said = tempfile.TemporaryFile()  # noqa: SIM115 - open while py-spy runs, closed by _finish
    try:
        spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=said)
    except OSError as exc:
        said.close()
        print(f"  WARNING no profile of {process}: {exc}", flush=True)
        return None
    return Recording(process, path, spy, said)


def _finish(recording: Recording) -> str | None:
    """Wait for py-spy to write its SVG: None when it did, IDLE or a warning's reason when not."""
    try:
        recording.spy.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        recording.spy.kill()
        recording.spy.wait()
    with recording.said:
        recording.said.seek(0)
        said = recording.said.read().decode(errors="replace")
    if recording.spy.returncode == 0 and recording.path.exists():
        return None
    recording.path.unlink(missing_ok=True)  # py-spy may leave an empty graph behind
    if NO_SAMPLES in said:
        return IDLE
    why = said.strip().splitlines()[:1] or [f"exit {recording.spy.returncode}"]
    print(f"  WARNING no profile of {recording.process}: {why[0]}", flush=True)
    return why[0]
