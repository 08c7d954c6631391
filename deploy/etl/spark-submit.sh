#!/usr/bin/env bash
# What `petrel etl daily --master spark://...` runs (services/etl/submit.py), written out for operators who
# submit the job themselves; tests/deploy/test_etl_deploy.py checks it is the same command line.
#
#   PETREL_ETL_MASTER=spark://spark-master:7077 \
#   PETREL_ETL_EVENTS_URI=hdfs:///petrel/events PETREL_ETL_WAREHOUSE_URI=hdfs:///petrel/warehouse \
#     deploy/etl/spark-submit.sh 2026-11-22
#
# The driver runs here (client mode) with PETREL_PYTHON (default: ./.venv/bin/python), a Python with
# Petrel and pyspark installed; spark-submit is $SPARK_HOME's, else the one pyspark ships. The executors
# run no Petrel code, but read the events and write the tables: give URIs every node reaches.
# PETREL_ETL_LOOKBACK_DAYS, _SHUFFLE_PARTITIONS, _UI_ENABLED, _JAVA_OPTIONS and _SPARK_OPTIONS are read as
# `petrel etl daily` reads them.
set -euo pipefail

day=${1:?usage: deploy/etl/spark-submit.sh YYYY-MM-DD}
master=${PETREL_ETL_MASTER:?set PETREL_ETL_MASTER: spark://host:7077, yarn or k8s://...}
events=${PETREL_ETL_EVENTS_URI:?set PETREL_ETL_EVENTS_URI: where the lifecycle events are, e.g. hdfs:///petrel/events}
warehouse=${PETREL_ETL_WAREHOUSE_URI:?set PETREL_ETL_WAREHOUSE_URI: where the tables go, e.g. hdfs:///petrel/warehouse}
python=${PETREL_PYTHON:-$PWD/.venv/bin/python}

spark_submit=$("$python" -c 'from services.etl.submit import spark_submit; print(spark_submit())')
java=()
if [ -n "${PETREL_ETL_JAVA_OPTIONS:-}" ]; then
    java=(--conf "spark.driver.extraJavaOptions=$PETREL_ETL_JAVA_OPTIONS"
          --conf "spark.executor.extraJavaOptions=$PETREL_ETL_JAVA_OPTIONS")
fi
# PETREL_ETL_SPARK_OPTIONS (key=value,...) as the settings read it: refused, naming the item, where they refuse it
spark_options=$("$python" -c 'import os, sys
from services.etl.settings import parse_spark_options
try:
    options = parse_spark_options(os.environ.get("PETREL_ETL_SPARK_OPTIONS", ""))
except ValueError as refused:
    sys.exit(f"PETREL_ETL_SPARK_OPTIONS: {refused}")
for key, value in options.items():
    print(f"{key}={value}")')
options=()
while IFS= read -r option; do
    if [ -n "$option" ]; then options+=(--conf "$option"); fi
done <<< "$spark_options"
job=$("$python" -c 'import pathlib, services.etl; print(pathlib.Path(services.etl.__file__).with_name("job.py"))')

exec "$spark_submit" \
    --master "$master" \
    --deploy-mode client \
    --name petrel-etl \
    --conf spark.sql.session.timeZone=UTC \
    --conf spark.sql.sources.partitionOverwriteMode=dynamic \
    --conf spark.sql.parquet.compression.codec=zstd \
    --conf "spark.sql.shuffle.partitions=${PETREL_ETL_SHUFFLE_PARTITIONS:-8}" \
    --conf "spark.ui.enabled=${PETREL_ETL_UI_ENABLED:-false}" \
    "${java[@]}" \
    "${options[@]}" \
    --conf "spark.pyspark.driver.python=$python" \
    "$job" \
    --date "$day" \
    --events "$events" \
    --warehouse "$warehouse" \
    --master "$master" \
    --lookback-days "${PETREL_ETL_LOOKBACK_DAYS:-1}"
