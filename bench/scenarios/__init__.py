"""Every benchmark scenario; importing this package registers them with the harness."""

from bench.scenarios import (
    chaos,
    consumers,
    datapath,
    etl,
    gateway,
    internal_client,
    push,
    replication,
    sizing,
    storage,
    timers,
    transactions,
)

__all__ = [
    "chaos",
    "consumers",
    "datapath",
    "etl",
    "gateway",
    "internal_client",
    "push",
    "replication",
    "sizing",
    "storage",
    "timers",
    "transactions",
]
