"""Every benchmark scenario; importing this package registers them with the harness."""

from bench.scenarios import internal_client

__all__ = ["internal_client"]
