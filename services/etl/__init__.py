"""The nightly Spark ETL: the services' lifecycle events (JSON lines) in, daily Parquet tables out.

`events` reads a day's events with one explicit schema and quarantines what does not
fit the contract; `tables` computes the daily tables from the good rows; `writer` writes
them partitioned by `dt` (a rerun replaces exactly that day); `job` runs it all;
`command` is `petrel etl daily`, which runs `job` here on a local master and hands any
other to `submit` (spark-submit); `arguments` is the job's command line, which both parse.
`command`, `arguments`, `settings` and `submit` do not import pyspark: the `petrel` command
loads Spark only when a job runs here. Imports go one way: `command` and `nightly` above
`job` and `submit`, above `arguments` and `settings` (.importlinter holds it). `commitlog_source` is the
`petrel-commitlog` data source: a broker's CommitLog segments read as a DataFrame.
`nightly` runs `petrel etl daily` for yesterday every night from Celery beat
(`python -m services.etl worker | beat | now`; `petrel up` starts the worker and beat).
"""
