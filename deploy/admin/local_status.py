"""`petrel status`: each process `petrel up` started (its <data>/run/cluster.json), with its port, health and
version (its `/healthz`: "-" when it names none, or for a process without one) and memory.

Memory is each process's proportional set size with its children's (a Celery worker's pool processes):
a page shared by N processes counts 1/N in each, so the total is what the cluster takes from the machine.
RSS, which counts a shared page in every process that maps it (a forked pool child shares most of its
parent's), is there too; it adds up to more than the machine gives. The `petrel up` supervisor is a row
of its own. A process listening on more than one port (the colocated gateway+broker-a, an etcd member's peer port)
shows them all.
"""

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
    processes = [*state["processes"], {"name": "petrel up", "pid": state["supervisor_pid"], "url": "", "running": True}]
    children = _children()
    listed = {process["pid"] for process in processes}
    rows, found = [], []
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        for process in processes:
            url = process["url"]
            port = urlparse(url).port if url.startswith("http") else None
            health, version = _health(client, url) if port else ("running" if process["running"] else "exited", "-")
            tree = [process["pid"], *_descendants(process["pid"], children, listed)]
            pss, rss = _memory_mb(tree, "Pss:"), _memory_mb(tree, "Rss:")
            found.append(
                {**process, "port": port, "health": health, "version": version, "pss_mb": pss, "rss_mb": rss}
                | {"children": len(tree) - 1}
            )
            others = process.get("other_ports") or []
            ports = " + ".join(f"{p:,}" for p in [port, *others]) if others and port else port
            rows.append((process["name"], process["pid"], ports, health, version, len(tree) - 1, pss, rss))
    if not quiet:
        print(table(rows, ["PROCESS", "PID", "PORT", "HEALTH", "VERSION", "CHILDREN", "MEM MB", "RSS MB"]))
        pss_total = sum(f["pss_mb"] or 0.0 for f in found)
        rss_total = sum(f["rss_mb"] or 0.0 for f in found)
        count = sum(1 + f["children"] for f in found)
        print(
            f"{count} processes, {pss_total:,.0f} MB (proportional: a shared page split among its processes; "
            f"RSS adds up to {rss_total:,.0f} MB)"
        )
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


def _children() -> dict[int, list[int]]:
    """Every live process's children, by parent pid (from /proc/<pid>/stat)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        parent = int(stat.rsplit(")", 1)[1].split()[1])  # the name may hold spaces and parentheses
        children.setdefault(parent, []).append(int(entry.name))
    return children


def _descendants(pid: int, children: dict[int, list[int]], listed: set[int]) -> list[int]:
    """The processes under `pid`, but for those `listed` (with theirs): each is a row of its own."""
    found, stack = [], [c for c in children.get(pid, []) if c not in listed]
    while stack:
        child = stack.pop()
        found.append(child)
        stack.extend(c for c in children.get(child, []) if c not in listed)
    return found


def _memory_mb(pids: list[int], field: str) -> float | None:
    """The sum of `field` (Pss: or Rss:, kB) of /proc/<pid>/smaps_rollup over `pids`; None when the first is gone."""
    total = 0
    for index, pid in enumerate(pids):
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            if index == 0:
                return None
            continue  # a child gone meanwhile
        total += next((int(line.split()[1]) for line in text.splitlines() if line.startswith(field)), 0)
    return round(total / 1024, 1)
