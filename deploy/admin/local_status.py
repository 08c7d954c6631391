"""`petrel status`: each process `petrel up` started (its <data>/run/cluster.json), with its port, health and
version (its `/healthz`: "-" when it names none, or for a process without one) and memory (RSS from /proc)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

from deploy.admin.gateway import AdminError
from deploy.admin.tables import table


def status(data_dir: str, quiet: bool) -> dict[str, Any]:
    state_file = Path(data_dir) / "run" / "cluster.json"
    try:
        state = json.loads(state_file.read_text())
    except FileNotFoundError:
        raise AdminError(
            f"no cluster runs from {data_dir}/ ({state_file} is missing): start one with petrel up"
        ) from None
    rows, found = [], []
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        for process in state["processes"]:
            url = process["url"]
            port = urlparse(url).port if url.startswith("http") else None
            health, version = _health(client, url) if port else ("running" if process["running"] else "exited", "-")
            rss = _rss_mb(process["pid"])
            found.append({**process, "port": port, "health": health, "version": version, "rss_mb": rss})
            rows.append((process["name"], process["pid"], port, health, version, rss))
    if not quiet:
        print(table(rows, ["PROCESS", "PID", "PORT", "HEALTH", "VERSION", "RSS MB"]))
        total = sum(r for r in (f["rss_mb"] for f in found) if r is not None)
        print(f"{len(found)} processes, {total:,.0f} MB resident")
    return {"processes": found}


def _health(client: httpx.Client, url: str) -> tuple[str, str]:
    """The process's health, and the version its /healthz names ("-" when it names none)."""
    try:
        answer = client.get(f"{url}/healthz")
    except httpx.HTTPError as exc:
        return f"down ({type(exc).__name__})", "-"
    if answer.status_code != 200:
        return f"{answer.status_code}", "-"
    try:
        found = answer.json()
    except ValueError:
        return "ok", "-"
    version = found.get("version") if isinstance(found, dict) else None
    return "ok", str(version) if version else "-"


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None
