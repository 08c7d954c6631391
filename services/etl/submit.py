"""Running the job on a cluster: `spark-submit` of `services/etl/job.py`, from $SPARK_HOME or the installed pyspark.

The driver runs here (client mode) with this venv's Python, so it imports Petrel as
`petrel etl daily` does; the executors run no Petrel code (the tables are DataFrame
expressions, no Python UDFs), so only the URIs must be reachable from them: `file://`
works on a cluster only when every node sees the same path (use hdfs:// or s3a://).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

from services.etl.arguments import daily_arguments
from services.etl.settings import EtlSettings


class SparkSubmitNotFound(RuntimeError):
    pass


def spark_submit() -> Path:
    """$SPARK_HOME/bin/spark-submit, else the one pyspark ships (found without importing pyspark)."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home) / "bin" / "spark-submit"
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SparkSubmitNotFound("pyspark is not installed (pip install -e '.[etl]') and SPARK_HOME is not set")
    return Path(next(iter(spec.submodule_search_locations))) / "bin" / "spark-submit"


def submit_command(settings: EtlSettings, day: date) -> list[str]:
    """The spark-submit command line that runs D's job on `settings.master`."""
    confs = {
        **settings.spark_conf(),
        "spark.pyspark.driver.python": sys.executable,
    }
    return [
        str(spark_submit()),
        "--master",
        settings.master,
        "--deploy-mode",
        "client",
        "--name",
        "petrel-etl",
        *(arg for key, value in confs.items() for arg in ("--conf", f"{key}={value}")),
        str(Path(__file__).with_name("job.py")),
        *daily_arguments(settings, day),
    ]


def submit(settings: EtlSettings, day: date) -> int:
    """Run the job through spark-submit; its exit status (its output goes straight to ours)."""
    return subprocess.call(submit_command(settings, day))
