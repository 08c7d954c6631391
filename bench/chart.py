"""The results as a picture: one horizontal bar per figure, ours over its reference, the target marked.

Written beside the JSON as a PNG (matplotlib's Agg canvas, no display). A bar's
length is the figure's ratio (for a lower-is-better figure, the reference over
ours, as in the table), green where it meets its target, red where it is BELOW,
grey where there is none; the target is a black tick across the bar, and with
several runs each run's ratio is a dot. The axis ends a little past the largest
ratio, at 3x at most (never short of 1.5 times the largest target); a ratio past
its end is drawn to the end, and every ratio is written on the right.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.figures import Figure

COLOURS = {"meets": "#3a9d5d", "BELOW": "#d0453b", "info": "#9a9a9a"}
AXIS_END = 3.0
ROW_INCHES = 0.42


def _label(figure: Figure) -> str:
    ratio = "-" if figure.ratio is None else f"{figure.ratio:.2f}x"
    target = "" if figure.target_ratio is None else f" / {figure.target_ratio:.2f}x {figure.verdict}"
    return ratio + target


def write_chart(figures: Sequence[Figure], path: Path, title: str, runs: Sequence[Sequence[float | None]] = ()) -> Path:
    """Draw `figures` (with `runs[i]`, figure i's ratio in each run, when there were several) into `path`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as Drawing

    targets = [f.target_ratio for f in figures if f.target_ratio is not None]
    largest = max((f.ratio for f in figures if f.ratio is not None), default=1.0)
    end = max(1.5 * max(targets, default=1.0), min(AXIS_END, max(1.25, 1.1 * largest)))
    drawing = Drawing(figsize=(12, 1.4 + ROW_INCHES * len(figures)))
    FigureCanvasAgg(drawing)
    axes = drawing.add_subplot()
    rows = list(range(len(figures)))[::-1]  # the first figure at the top, as in the table
    ratios = [min(f.ratio or 0.0, end) for f in figures]
    axes.barh(rows, ratios, height=0.6, color=[COLOURS[f.verdict] for f in figures])
    for row, figure in zip(rows, figures, strict=True):
        if figure.target_ratio is not None:
            axes.plot([figure.target_ratio] * 2, [row - 0.4, row + 0.4], color="black", linewidth=2.5)
        axes.text(
            1.01,
            row,
            _label(figure),
            va="center",
            fontsize=9,
            color=COLOURS[figure.verdict],
            transform=axes.get_yaxis_transform(),
            fontweight="bold",
        )
    for row, per_run in zip(rows, runs, strict=False):
        shown = [min(r, end) for r in per_run if r is not None]
        axes.scatter(shown, [row] * len(shown), s=14, color="black", zorder=3)
    axes.set_yticks(rows, [f"{f.name}\n({f.reference_name})" for f in figures], fontsize=8)
    axes.set_xlim(0, end)
    axes.axvline(1.0, color="#555555", linewidth=0.8, linestyle=":")
    axes.set_xlabel("ours / reference (lower-is-better figures: reference / ours); black tick: target")
    axes.set_title(title, fontsize=11)
    axes.grid(axis="x", alpha=0.3)
    drawing.tight_layout()
    drawing.savefig(path, dpi=110)
    return path
