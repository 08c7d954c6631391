"""A group's lag history over every broker: the brokers' samples (services.broker.lag_history) added up per interval.

Each broker samples on its own timer, so samples of one moment differ by up to an interval
between brokers. A sample counts in the interval its time falls in (its latest there, should
a broker have two); an interval where a broker has none takes that broker's previous one (it
was sampled a moment before or after), so a sum never drops because two timers drifted.
The latest interval is still open: a broker that has not sampled in it yet may change its sum
(its carried value gives way to its own); every earlier interval is final.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from gateway.groups.schemas import LagHistory, LagPoint, LagSeries


def merged(
    group: str, answers: Iterable[tuple[str, dict[str, Any]]], topic: str | None, unavailable: list[str]
) -> LagHistory:
    answered = list(answers)
    interval = max((a["interval_seconds"] for _, a in answered), default=10.0)
    retention = max((a["history_seconds"] for _, a in answered), default=3600.0)
    width_ms = max(1, int(interval * 1000))
    per_broker: list[dict[int, dict[str, int]]] = []
    for _, answer in answered:
        buckets: dict[int, dict[str, int]] = {}
        for sample in answer["samples"]:  # oldest first: the latest of an interval wins
            buckets[sample["at_ms"] // width_ms] = sample["topics"]
        per_broker.append(buckets)
    moments = sorted({b for buckets in per_broker for b in buckets})
    totals: dict[str, list[LagPoint]] = {}
    last: list[dict[str, int] | None] = [None] * len(per_broker)
    for moment in moments:
        summed: dict[str, int] = {}
        for index, buckets in enumerate(per_broker):
            seen = buckets.get(moment, last[index])
            last[index] = seen
            for name, lag in (seen or {}).items():
                summed[name] = summed.get(name, 0) + lag
        at = datetime.fromtimestamp(moment * width_ms / 1000, UTC)
        for name, lag in summed.items():
            if topic is None or name == topic:
                totals.setdefault(name, []).append(LagPoint(at=at, lag=lag))
    return LagHistory(
        group=group,
        interval_seconds=interval,
        retention_seconds=retention,
        series=[LagSeries(topic=name, samples=points) for name, points in sorted(totals.items())],
        unavailable=unavailable,
    )
