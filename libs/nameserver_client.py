"""Moved to `libs.broker_api.nameservers`; kept only until the gateway imports it from there (issue 11)."""

from libs.broker_api.nameservers import NameserverClient as NameserverClient  # noqa: PLC0414
