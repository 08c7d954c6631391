"""The `petrel up` supervisor stays up as long as the cluster: it loads the settings it plans with, not the web stack.

Each module it keeps costs memory for the cluster's whole life (`petrel status` shows its row):
fastapi and the etcd client under it were ~10 MB of the supervisor's 66 MB PSS.
"""

from __future__ import annotations

import subprocess
import sys


def test_the_supervisor_imports_no_web_framework() -> None:
    heavy = ("fastapi", "starlette", "libs.etcd.client")
    probe = f"import sys, deploy.up; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert found.stdout.strip() == "[]", found.stdout + found.stderr
