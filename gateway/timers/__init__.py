"""Scheduled delivery: timer statistics, cancelling a scheduled message."""
