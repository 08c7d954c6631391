"""The report's charts: a day's rows (dicts, as the tables hold them) drawn as PNG bytes with matplotlib.

Each chart is a `Figure` drawn on the Agg canvas (no pyplot: no display, no global
figure state), hours on a 0-23 UTC axis. A chart is asked for only when it has rows:
the page shows "no data" instead.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator

Record = Mapping[str, Any]

HOURS = range(24)
PALETTE = ("#1f6fb2", "#e07b28", "#2f9e57", "#c23b3b", "#7a56b8", "#8c6d46", "#d462a6", "#6b7280")
PERCENTILE_STYLES = (("p50", "-", "o"), ("p95", "--", "s"), ("p99", ":", "^"))
LATENESS_COLORS = ("#8fb8de", "#1f6fb2", "#0b3c66")
FAILURE_COUNTS = (("nacked", "#e0a528"), ("retried", "#e07b28"), ("dead_lettered", "#c23b3b"))
PUSH_OUTCOMES = (
    ("acked", "#2f9e57"),
    ("deferred", "#1f6fb2"),
    ("failed", "#c23b3b"),
    ("throttled", "#e0a528"),
    ("gone", "#7a56b8"),
    ("lost", "#6b7280"),
)
"""push_hourly's outcome columns, stacked in this order (services.etl.push.OUTCOMES)."""
DURATION_UNITS = ((60_000, "min"), (1000, "s"), (1, "ms"))
MIN_HOURS = 6
MAX_SERIES = 8
"""A chart draws at most this many topics (the busiest) or group · topic pairs (the slowest); the table has all."""
WIDTH, HEIGHT, DPI = 10.0, 2.8, 100


def duration(ms: float) -> str:
    """850 ms, 1.2 s, 3.5 min: a latency as a person reads it."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.3g} s"
    return f"{ms / 60_000:.3g} min"


def group_label(row: Record) -> str:
    return f"{row['group']} · {row['topic']}"


def throughput(rows: Sequence[Record]) -> bytes:
    """Messages sent per hour, stacked by topic."""
    figure, axes = _figure()
    _stacked(axes, _busiest(_per_hour(rows, "topic", "sent")), _colors())
    _hour_axis(axes, {row["hour"] for row in rows})
    axes.set_ylabel("messages sent")
    _legend(axes, "topic")
    return _png(figure)


def push_attempts(rows: Sequence[Record]) -> bytes:
    """Push attempts per hour, stacked by outcome (every group, topic and endpoint together)."""
    figure, axes = _figure()
    series: dict[str, dict[int, int]] = {outcome: {} for outcome, _ in PUSH_OUTCOMES}
    for row in rows:
        for outcome, by_hour in series.items():
            by_hour[row["hour"]] = by_hour.get(row["hour"], 0) + (row[outcome] or 0)
    _stacked(axes, series, (color for _, color in PUSH_OUTCOMES))
    _hour_axis(axes, {row["hour"] for row in rows})
    axes.set_ylabel("push attempts")
    _legend(axes, "outcome")
    return _png(figure)


def latencies(rows: Sequence[Record]) -> bytes:
    """Send to first delivery, and to first ack, per hour: p50/p95/p99 of each group on each topic."""
    figure = Figure(figsize=(WIDTH, HEIGHT + 0.4), layout="constrained")
    left, right = figure.subplots(1, 2, sharey=True)
    slowest: dict[str, float] = {}
    for row in rows:
        slowest[group_label(row)] = max(slowest.get(group_label(row), -1.0), float(row["delivery_p99_ms"] or 0))
    series = sorted(sorted(slowest, key=lambda label: -slowest[label])[:MAX_SERIES])
    if len(slowest) > len(series):
        figure.suptitle(
            f"the {len(series)} slowest of {len(slowest)} group · topic pairs (all in the table)", fontsize=9
        )
    rows = [row for row in rows if group_label(row) in series]
    colors = dict(zip(series, _colors(), strict=False))
    for axes, kind, title in ((left, "delivery", "send → first delivery"), (right, "ack", "send → first ack")):
        for n, label in enumerate(series):
            own = [row for row in rows if group_label(row) == label]
            beside = [h + (n - (len(series) - 1) / 2) * 0.8 / max(len(series), 3) for h in HOURS]  # no overlaps
            for percentile, line, marker in PERCENTILE_STYLES:
                values = {row["hour"]: row[f"{kind}_{percentile}_ms"] for row in own}
                points = [_number(values.get(h)) for h in HOURS]
                axes.plot(beside, points, linestyle=line, marker=marker, markersize=5, color=colors[label])
        axes.set_title(title, fontsize=10)
        _hour_axis(axes, {row["hour"] for row in rows})
    columns = [f"{kind}_{p}_ms" for kind in ("delivery", "ack") for p, _, _ in PERCENTILE_STYLES]
    left.set_ylim(0, _duration_axis(left.yaxis, max(row[c] or 0 for row in rows for c in columns)))
    handles = [left.plot([], [], color=colors[label], linewidth=3)[0] for label in series]
    styles = [left.plot([], [], color="#444", linestyle=s, marker=m)[0] for _, s, m in PERCENTILE_STYLES]
    left.legend(styles, [p for p, _, _ in PERCENTILE_STYLES], loc="upper left", frameon=False, fontsize=9)
    _legend(right, "group · topic", handles, series)
    return _png(figure)


def failures(totals: Sequence[Record]) -> bytes:
    """The day's nacks, retries and dead letters of each group on each topic, side by side."""
    labels = [group_label(row) for row in totals]
    figure, axes = _figure(height=max(1.5, 0.8 + 0.45 * len(labels)))
    bar = 0.8 / len(FAILURE_COUNTS)
    for i, (column, color) in enumerate(FAILURE_COUNTS):
        positions = [n + (i - 1) * bar for n in range(len(labels))]
        counts = [row[column] for row in totals]
        bars = axes.barh(positions, counts, height=bar, color=color, label=column.replace("_", " "))
        axes.bar_label(bars, labels=[f"{n:,}" if n else "" for n in counts], padding=3, fontsize=8)
    axes.set_yticks(range(len(labels)), labels)
    axes.invert_yaxis()
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("messages")
    axes.margins(x=0.08)
    _legend(axes)
    return _png(figure)


def lateness(rows: Sequence[Record]) -> bytes:
    """How late fired scheduled messages reached their topic: p50/p95/p99 per topic."""
    figure, axes = _figure(height=max(1.5, 0.8 + 0.45 * len(rows)))
    bar = 0.8 / len(PERCENTILE_STYLES)
    for i, ((percentile, _, _), color) in enumerate(zip(PERCENTILE_STYLES, LATENESS_COLORS, strict=True)):
        values = [_number(row[f"lateness_{percentile}_ms"]) for row in rows]
        bars = axes.barh([n + (i - 1) * bar for n in range(len(rows))], values, height=bar, color=color)
        axes.bar_label(bars, labels=[duration(v) for v in values], padding=3, fontsize=8)
        bars.set_label(percentile)
    axes.set_yticks(range(len(rows)), [str(row["topic"]) for row in rows])
    axes.invert_yaxis()
    largest = max(row[f"lateness_{p}_ms"] or 0 for row in rows for p, _, _ in PERCENTILE_STYLES)
    axes.set_xlim(0, _duration_axis(axes.xaxis, largest) * 1.12)  # room for the labels
    axes.set_xlabel("after the due time")
    _legend(axes)
    return _png(figure)


def _figure(height: float = HEIGHT) -> tuple[Figure, Axes]:
    figure = Figure(figsize=(WIDTH, height), layout="constrained")
    axes = figure.subplots()
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    axes.grid(axis="both", color="#e5e7eb", linewidth=0.8)
    axes.set_axisbelow(True)
    return figure, axes


def _stacked(axes: Axes, series: Mapping[str, Mapping[int, int]], colors: Iterable[str]) -> None:
    """A bar per hour, each series (its name the label) stacked on the ones before it."""
    below = [0] * len(HOURS)
    for color, (label, by_hour) in zip(colors, series.items(), strict=False):
        counts = [by_hour.get(h, 0) for h in HOURS]
        axes.bar(HOURS, counts, bottom=below, width=0.8, color=color, label=label)
        below = [b + n for b, n in zip(below, counts, strict=True)]
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))


def _duration_axis(axis: Axis, largest_ms: float) -> float:
    """Ticks at round numbers of the unit that suits the largest value (ms, s, min); the last tick's ms."""
    unit, name = next((unit, name) for unit, name in DURATION_UNITS if largest_ms >= unit or unit == 1)
    ticks = [tick for tick in MaxNLocator(nbins=6).tick_values(0, max(largest_ms / unit, 1)) if tick >= 0]
    axis.set_major_locator(FixedLocator([tick * unit for tick in ticks]))
    axis.set_major_formatter(FuncFormatter(lambda ms, _: f"{ms / unit:g} {name}"))
    return float(ticks[-1] * unit)


def _legend(axes: Axes, title: str | None = None, *entries: Any) -> None:
    """Beside the chart, where it hides no data."""
    axes.legend(*entries, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=9, title=title)


def _hour_axis(axes: Axes, hours: set[int]) -> None:
    """The hours that have rows, an hour either side, at least MIN_HOURS of the day."""
    first, last = max(min(hours) - 1, 0), min(max(hours) + 1, 23)
    missing = MIN_HOURS - (last - first + 1)
    if missing > 0:
        first = max(first - missing // 2, 0)
        last = min(first + MIN_HOURS - 1, 23)
        first = max(last - MIN_HOURS + 1, 0)
    step = 1 if last - first < 12 else 2
    axes.set_xlim(first - 0.5, last + 0.5)
    axes.set_xticks(range(first, last + 1, step), [f"{h:02d}" for h in range(first, last + 1, step)])
    axes.set_xlabel("hour (UTC)")
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    axes.grid(color="#e5e7eb", linewidth=0.8)
    axes.set_axisbelow(True)


def _per_hour(rows: Iterable[Record], key: str, value: str) -> dict[str, dict[int, int]]:
    series: dict[str, dict[int, int]] = {}
    for row in sorted(rows, key=lambda r: str(r[key])):
        by_hour = series.setdefault(str(row[key]), {})
        by_hour[row["hour"]] = by_hour.get(row["hour"], 0) + (row[value] or 0)
    return series


def _busiest(series: dict[str, dict[int, int]]) -> dict[str, dict[int, int]]:
    """The MAX_SERIES - 1 topics that sent most, in name order, and the rest summed as one series."""
    if len(series) <= MAX_SERIES:
        return series
    ranked = sorted(series, key=lambda topic: -sum(series[topic].values()))
    kept, rest = sorted(ranked[: MAX_SERIES - 1]), ranked[MAX_SERIES - 1 :]
    others: dict[int, int] = {}
    for topic in rest:
        for hour, count in series[topic].items():
            others[hour] = others.get(hour, 0) + count
    return {topic: series[topic] for topic in kept} | {f"{len(rest)} other topics": others}


def _colors() -> Iterable[str]:
    while True:
        yield from PALETTE


def _number(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _png(figure: Figure) -> bytes:
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=DPI, facecolor="white", metadata={"Software": None})
    return out.getvalue()
