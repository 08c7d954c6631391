"""Shared pieces of the HTTP edge: common path parameters, message fields, per-entry errors."""
