"""docs/security.md's table of what each operation needs is the gateway's own (gateway.auth.needs.NEEDS)."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.auth.needs import NEEDS

ROOT = Path(__file__).resolve().parents[2]


def test_the_pages_permission_table_is_the_one_the_gateway_enforces() -> None:
    spec = json.loads((ROOT / "openapi" / "gateway.json").read_text())
    where = {o["operationId"]: (m.upper(), p) for p, ms in spec["paths"].items() for m, o in ms.items()}
    expected = [
        f"| `{where[op][0]} {where[op][1]}` | {'; '.join(n.text() for n in needs)} |" for op, needs in NEEDS.items()
    ]
    page = (ROOT / "docs" / "security.md").read_text().splitlines()
    rows = [line for line in page if line.startswith("| `") and "/v1/" in line]
    assert rows == expected, "docs/security.md's operation table differs from gateway/auth/needs.py"
