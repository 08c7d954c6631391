"""A Spark standalone cluster on loopback (a master and one worker), started from the installed pyspark.

`spark-class` runs the master and the worker as they run on a real cluster; the test
submits to `spark://127.0.0.1:<port>` and the executors are separate JVMs (and Python
workers) that see only what the job ships them.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.serving import free_port
from tests.support.spark import TEST_JAVA_OPTIONS
from tests.support.waiting import wait_until


@dataclass(frozen=True, slots=True)
class StandaloneCluster:
    master_url: str
    spark_home: Path
    logs: Path

    def master_log(self) -> str:
        return (self.logs / "master.log").read_text(errors="replace")


def spark_home() -> Path:
    import pyspark  # the installed pyspark carries bin/spark-class and the jars

    return Path(pyspark.__file__).parent


@contextmanager
def standalone_cluster(workdir: Path, cores: int = 1, memory: str = "1g") -> Iterator[StandaloneCluster]:
    home = spark_home()
    port = free_port()
    logs = workdir / "spark-logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_JAVA_OPTS": TEST_JAVA_OPTIONS,  # the master and the worker; executors take the job's own
    }
    spark_class = str(home / "bin" / "spark-class")
    master_log = logs / "master.log"
    worker_log = logs / "worker.log"
    url = f"spark://127.0.0.1:{port}"
    master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
    worker = ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", str(cores)]
    worker += ["--memory", memory, "--work-dir", str(workdir / "spark-work")]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        processes.append(_start([spark_class, *master, "--webui-port", str(free_port())], master_log, env))
        processes.append(_start([spark_class, *worker, "--webui-port", str(free_port())], worker_log, env))
        wait_until(
            lambda: "Registering worker" in master_log.read_text(errors="replace"),
            "the Spark worker registers with its master",
            timeout=90,
            context=lambda: _tail(master_log) + _tail(worker_log),
        )
        yield StandaloneCluster(url, home, logs)
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _tail(log: Path) -> str:
    return f"--- {log.name}\n" + log.read_text(errors="replace")[-2000:]


def _start(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
