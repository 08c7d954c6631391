"""Every benchmark scenario; importing this package registers them with the harness."""

from bench.scenarios import consumers, gateway, internal_client, storage, timers, transactions

__all__ = ["consumers", "gateway", "internal_client", "storage", "timers", "transactions"]
