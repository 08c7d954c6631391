"""deploy/grafana/petrel-dashboard.json draws only metrics the services export."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "petrel-dashboard.json"
SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def exported() -> set[str]:
    """Every metric name the code registers (a string literal petrel_... in services, gateway, libs)."""
    names: set[str] = set()
    for folder in ("services", "gateway", "libs"):
        for path in (ROOT / folder).rglob("*.py"):
            names.update(re.findall(r'"(petrel_[a-z_]+)"', path.read_text()))
    return names


def test_every_panel_queries_a_metric_the_services_export() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    known = exported()
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\b(petrel_[a-z_]+)", target["expr"])
    }
    assert queried, "the dashboard queries nothing"
    unknown = {n for n in queried if n not in known and not any(n.removesuffix(s) in known for s in SUFFIXES)}
    assert unknown == set(), f"the dashboard queries metrics no service exports: {sorted(unknown)}"
    assert "petrel_group_lag" in queried
