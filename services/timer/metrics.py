"""TimerCollector: the timer's stats as Prometheus metrics, read at scrape time (nothing on the hot path)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.timer.scheduler import TimerScheduler


class TimerCollector(Collector):
    def __init__(self, scheduler: TimerScheduler) -> None:
        self.scheduler = scheduler

    def collect(self) -> Iterator[Metric]:
        counters = self.scheduler.counters
        for name, value, text in (
            ("delivered", counters.delivered, "Scheduled messages delivered"),
            ("rolled", counters.rolled, "Timers rolled because their time was beyond the wheel's window"),
            ("cancelled", counters.cancelled, "Scheduled messages cancelled before their time"),
            ("retried", counters.retried, "Deliveries tried again (broker away, or it refused the entry)"),
            ("failed", counters.failed, "Scheduled messages dropped after max refused deliveries"),
            (
                "lost",
                counters.lost + self.scheduler.keeper.lost,
                "Scheduled messages their broker's log no longer holds (after a failover)",
            ),
            ("retention_rolled", self.scheduler.keeper.rolled, "Messages re-put before their broker's retention"),
        ):
            yield CounterMetricFamily(f"petrel_timer_{name}", text, value=value)
        levels = GaugeMetricFamily("petrel_timer_level_pending", "Messages waiting per delay level", labels=["level"])
        pending, wheel_pending = self.scheduler.pending(self.scheduler.store.stats(max_scan=0).pending)
        for queue_id, count in sorted(pending.items()):
            levels.add_metric([str(queue_id + 1)], count)
        yield levels
        yield GaugeMetricFamily(
            "petrel_timer_wheel_pending", "Exact-time messages in the timer wheel", value=wheel_pending
        )
        lateness = GaugeMetricFamily(
            "petrel_timer_lateness_ms", "Delivery lateness over the last 10,000 deliveries", labels=["quantile"]
        )
        sample = sorted(counters.lateness_ms)
        for quantile in (0.5, 0.99, 1.0):
            if sample:
                lateness.add_metric([str(quantile)], sample[min(len(sample) - 1, int(len(sample) * quantile))])
        yield lateness
