"""PushCollector: the push subscriptions' live state as Prometheus metrics, read at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.push.attempts import Outcome
from services.push.deliveries import Deliveries

LABELS = ["group", "topic"]


class PushCollector(Collector):
    def __init__(self, deliveries: Deliveries) -> None:
        self.deliveries = deliveries

    def collect(self) -> Iterator[Metric]:
        attempts = CounterMetricFamily(
            "petrel_push_attempts",
            "Delivery attempts since the service started, by outcome",
            labels=[*LABELS, "outcome"],
        )
        for (group, topic), log in sorted(self.deliveries.logs.items()):
            for outcome in Outcome:
                attempts.add_metric([group, topic, outcome.value], log.counts[outcome])
        yield attempts
        in_flight = GaugeMetricFamily("petrel_push_in_flight", "Deliveries leased and not yet settled", labels=LABELS)
        window = GaugeMetricFamily("petrel_push_window", "Deliveries allowed at once now", labels=LABELS)
        circuit = GaugeMetricFamily("petrel_push_circuit_open", "1 while the circuit is open or probing", labels=LABELS)
        for (group, topic), dispatcher in sorted(self.deliveries.running.items()):
            in_flight.add_metric([group, topic], len(dispatcher.deliveries))
            window.add_metric([group, topic], dispatcher.window.size)
            circuit.add_metric([group, topic], 0 if dispatcher.breaker.state == "closed" else 1)
        yield from (in_flight, window, circuit)
