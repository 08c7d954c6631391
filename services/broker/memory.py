"""Gauges of the broker's in-memory structures that traffic could grow: each one has a bound to watch."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from services.broker.consume.pop import PopService
from services.broker.transactions import Transactions


def watch_memory(registry: CollectorRegistry, pop: PopService, transactions: Transactions) -> None:
    gauges = {
        "petrel_broker_lease_timers": ("Lease timers pending (dead ones are compacted away)", lambda: len(pop.timers)),
        "petrel_broker_consume_windows": (
            "Consume windows (group or broadcast client, queue)",
            lambda: len(pop.windows),
        ),
        "petrel_broker_broadcast_clients": (
            "Broadcast clients seen and not yet expired",
            lambda: len(pop.clients.last_seen),
        ),
        "petrel_broker_long_polls_waiting": (
            "Receives and pulls waiting for a message",
            lambda: pop.waiters.waiting,
        ),
        "petrel_broker_ended_transactions_in_memory": (
            "Ended transactions held in memory (older ones are read from the op queue)",
            lambda: len(transactions.outcomes),
        ),
    }
    for name, (description, value) in gauges.items():
        Gauge(name, description, registry=registry).set_function(value)
