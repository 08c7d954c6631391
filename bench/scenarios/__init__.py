"""Every benchmark scenario; importing this package registers them with the harness."""

from bench.scenarios import gateway, internal_client, storage, timers

__all__ = ["gateway", "internal_client", "storage", "timers"]
