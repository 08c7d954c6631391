"""Processes that serve no HTTP load no web framework: `petrel up`'s supervisor and the Celery workers and beats.

Each lives as long as the cluster, and each module it keeps costs memory all that time
(`petrel status` shows it): fastapi, starlette and what they pull in were ~10 MB of each.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

WEB = ("fastapi", "starlette", "uvicorn", "libs.etcd.client")


@pytest.mark.parametrize("module", ["deploy.up", "services.txcheck.__main__", "services.etl.__main__"])
def test_a_process_without_http_imports_no_web_framework(module: str) -> None:
    probe = f"import sys, {module}; print(sorted(m for m in {WEB!r} if m in sys.modules))"
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert found.stdout.strip() == "[]", found.stdout + found.stderr
