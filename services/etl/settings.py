"""ETL settings (env prefix `PETREL_ETL_`; the data directory: `PETREL_DATA_DIR`).

The `nightly*` fields and `redis_key_prefix` are the nightly schedule's (`services.etl.nightly`);
the job itself reads the others.
"""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from libs.settings import ServiceSettings, cluster_key_prefix


class EtlSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="PETREL_ETL_", extra="ignore")

    reference_omits: ClassVar[frozenset[str]] = frozenset({"host", "port"})
    """The job listens nowhere: docs/settings.md leaves these inherited fields out."""

    events_uri: str | None = Field(
        default=None,
        description="where the lifecycle events are read (file://, hdfs://, s3a://); "
        "default: file://<data_dir>/export/events",
    )
    warehouse_uri: str | None = Field(
        default=None,
        description="where the tables are written (file://, hdfs://, s3a://); default: file://<data_dir>/warehouse",
    )
    master: str = Field(
        default="local[*]",
        description="the Spark master: local[N] runs in this process; spark://, yarn or k8s:// go through spark-submit",
    )
    lookback_days: int = Field(
        default=1,
        ge=0,
        le=7,
        description="days' folders either side of a date also read: an event belongs to the day of its ts, "
        "whatever folder it was written to (a late event of D is in D+1's files)",
    )
    commitlog_uris: str | None = Field(
        default=None,
        description="brokers' CommitLog directories (paths or file:// URIs, comma separated) the job reconciles "
        "with the events in commitlog_daily; default on a local master: every <data_dir>/brokers/<broker>/commitlog "
        "there is; on a cluster: none (no reconciliation)",
    )
    shuffle_partitions: int = Field(default=8, ge=1, description="spark.sql.shuffle.partitions of the job")
    ui_enabled: bool = Field(default=False, description="start the Spark web UI while the job runs")
    java_options: str | None = Field(
        default=None,
        description="JVM options of the job's driver and executors (spark.driver/executor.extraJavaOptions), "
        "e.g. `-XX:TieredStopAtLevel=1` on a small machine running short days: no C2 compiler threads taking "
        "the cores, but long days run slower",
    )
    spark_options: str | None = Field(
        default=None,
        description="more Spark settings of the job, comma separated `key=value` "
        "(e.g. `spark.executor.memory=4g,spark.sql.adaptive.enabled=false`), given to its session or spark-submit; "
        "not those the job sets itself or that have a setting of their own here; a value cannot hold a comma",
    )
    nightly: bool = Field(
        default=True,
        description="`petrel up` starts the nightly run's Celery worker and beat (false: leaves them out, "
        "as `petrel up --no-etl` does)",
    )
    nightly_at: str = Field(
        default="02:30", description="HH:MM, UTC: when beat starts the nightly run of the day before"
    )
    nightly_time_limit_seconds: int = Field(
        default=6 * 3600,
        ge=60,
        description="a nightly run still going after this is stopped (its Redis lock lasts a minute longer)",
    )
    redis_key_prefix: str | None = Field(
        default=None,
        description="prefix of the nightly run's Redis lock and Celery queue; default: petrel:etl:<hash of the "
        "data dir>: (as `petrel up` gives its processes: clusters sharing a Redis stay apart)",
    )

    @field_validator("nightly_at")
    @classmethod
    def _hour_and_minute(cls, value: str) -> str:
        if not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", value):
            raise ValueError(f"nightly_at {value!r} is not a UTC time HH:MM (00:00 to 23:59)")
        return value

    @field_validator("spark_options")
    @classmethod
    def _spark_settings(cls, value: str | None) -> str | None:
        if value is not None:
            parse_spark_options(value)
        return value

    @property
    def key_prefix(self) -> str:
        return self.redis_key_prefix or cluster_key_prefix("etl", self.data_dir)

    @property
    def nightly_hour_minute(self) -> tuple[int, int]:
        hour, minute = self.nightly_at.split(":")
        return int(hour), int(minute)

    @property
    def runs_locally(self) -> bool:
        """local, local[N], local[*]: the job runs in this process; any other master through spark-submit."""
        return self.master == "local" or self.master.startswith("local[")

    def spark_conf(self) -> dict[str, str]:
        """What the job needs of any session it runs in (the tests build theirs with the same)."""
        return (
            {
                "spark.sql.session.timeZone": "UTC",
                "spark.sql.sources.partitionOverwriteMode": "dynamic",
                "spark.sql.parquet.compression.codec": "zstd",
                "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
                "spark.ui.enabled": str(self.ui_enabled).lower(),
            }
            | self.java_conf()
            | (parse_spark_options(self.spark_options) if self.spark_options else {})
        )

    def java_conf(self) -> dict[str, str]:
        """`java_options` for the driver (read when spark-submit or pyspark starts its JVM) and the executors."""
        if not self.java_options:
            return {}
        return {
            "spark.driver.extraJavaOptions": self.java_options,
            "spark.executor.extraJavaOptions": self.java_options,
        }

    @property
    def events(self) -> str:
        return self.events_uri or (self.data_dir / "export" / "events").resolve().as_uri()

    @property
    def commitlogs(self) -> list[str]:
        """The CommitLogs to reconcile: those given, else on a local master the local brokers' (perhaps none).

        A cluster's executors would not see this machine's directories, nor run Petrel's Python unless
        installed for it (docs/etl-commitlog.md): there, only CommitLogs given are read.
        """
        if self.commitlog_uris is not None:
            return [uri.strip() for uri in self.commitlog_uris.split(",") if uri.strip()]
        if not self.runs_locally:
            return []
        found = sorted(path for path in (self.data_dir / "brokers").glob("*/commitlog") if path.is_dir())
        return [path.resolve().as_uri() for path in found]

    @property
    def warehouse(self) -> str:
        return self.warehouse_uri or (self.data_dir / "warehouse").resolve().as_uri()


OWN_SPARK_SETTINGS = {
    "spark.sql.session.timeZone": "the job's days are UTC days",
    "spark.sql.sources.partitionOverwriteMode": "a rerun replaces only its own day",
    "spark.sql.parquet.compression.codec": "the tables are zstd Parquet",
    "spark.sql.shuffle.partitions": "PETREL_ETL_SHUFFLE_PARTITIONS",
    "spark.ui.enabled": "PETREL_ETL_UI_ENABLED",
    "spark.driver.extraJavaOptions": "PETREL_ETL_JAVA_OPTIONS",
    "spark.executor.extraJavaOptions": "PETREL_ETL_JAVA_OPTIONS",
}
"""The Spark settings `spark_options` may not give: the job's own, and those with a setting of their own (named)."""


def parse_spark_options(value: str) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        key, equals, setting = item.partition("=")
        key = key.strip()
        if not equals or not key.startswith("spark.") or not setting.strip():
            raise ValueError(f"spark_options: {item!r} is not a Spark setting `spark.<name>=<value>`")
        if key in OWN_SPARK_SETTINGS:
            raise ValueError(f"spark_options: {key} is not yours to set here ({OWN_SPARK_SETTINGS[key]})")
        conf[key] = setting.strip()
    return conf
