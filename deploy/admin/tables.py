"""Plain tables for people (a command's `--json` is for scripts)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """Columns padded to their widest cell, numbers right-aligned; `(none)` for no rows."""
    if not rows:
        return "(none)"
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], int | float) for row in rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    return "\n".join([line(list(headers)), *(line(r) for r in cells)])


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)
