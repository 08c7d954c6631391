"""The nightly Spark ETL: the services' lifecycle events (JSON lines) in, daily Parquet tables out.

`events` reads a day's events with one explicit schema and quarantines what does not
fit the contract; `tables` computes the daily tables from the good rows; `writer` writes
them partitioned by `dt` (a rerun replaces exactly that day); `job` runs it all and
`submit` hands a non-local master to `spark-submit`. Spark is imported only inside
functions, so importing this package never starts (or even loads) it.
"""
