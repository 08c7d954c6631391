"""Every operation of the gateway's spec, called without a key, with a bad one, with one of the wrong scope, and
with one holding exactly the grants the operation declares: refused, refused, refused, let through."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.auth.key_check import OPEN_PATHS
from gateway.auth.needs import NEEDS, Need
from libs.auth.grants import Action
from tests.support.api_keys import bearer, issue_key, make_key

pytestmark = pytest.mark.asyncio

PATH_VALUES = {
    "topic": "orders",
    "group": "billing",
    "queue_id": "0",
    "message_id": "0" * 32,
    "transaction_id": "broker-a:" + "0" * 32,
    "key_id": "0123456789ab",
}


@pytest.fixture
def admin_key(tmp_path: Path) -> str:
    return issue_key(tmp_path, "admin", "pub", "sub", name="root")


@pytest.fixture
def gateway_overrides(tmp_path: Path, admin_key: str) -> dict[str, Any]:
    return {"auth": "required", "data_dir": tmp_path}


def operations(spec: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(operationId, method, path with its parameters filled) of every operation that needs a key."""
    found = []
    for path, methods in spec["paths"].items():
        if path in OPEN_PATHS:
            continue
        for method, operation in methods.items():
            filled = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES[str(m[1])], path)
            found.append((operation["operationId"], method.upper(), filled))
    return found


def exact_grants(needs: tuple[Need, ...]) -> list[str]:
    """The fewest grants that meet the needs, on the names this test's paths use."""
    grants = []
    for need in needs:
        action = need.actions[0].value
        if need.kind == "cluster" or need.param is None:
            grants.append(action)
        else:
            grants.append(f"{action}:{need.kind}/{PATH_VALUES[need.param]}")
    return grants


def lacking_grants(needs: tuple[Need, ...]) -> list[str]:
    """Grants of every action the operation cannot use, on every name (empty when it takes any action)."""
    used = {action for need in needs for action in need.actions}
    return [action.value for action in Action if action not in used]


async def test_every_operation_refuses_without_the_grants_it_declares(
    gateway: httpx.AsyncClient, admin_key: str
) -> None:
    spec = (await gateway.get("/openapi.json")).json()
    assert spec["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"
    ops = operations(spec)
    assert {op for op, _, _ in ops} == set(NEEDS), "the spec's operations and the permission table differ"
    revoked = await make_key(gateway, admin_key, "admin", "pub", "sub")
    revoked_id = revoked["authorization"].split("_")[1]
    assert (await gateway.delete(f"/v1/keys/{revoked_id}", headers=bearer(admin_key))).status_code == 204
    elsewhere = await make_key(gateway, admin_key, "pub:elsewhere", "sub:elsewhere", "admin:elsewhere")
    wrong: list[str] = []
    counts = {"401": 0, "403": 0, "through": 0}

    async def expect(op: str, method: str, path: str, headers: dict[str, str], refused: int | None) -> None:
        answer = await gateway.request(
            method, path, headers=headers | {"content-type": "application/json"}, content=b"{}"
        )
        if refused is None:
            ok = answer.status_code not in (401, 403)
            counts["through"] += ok
        else:
            ok = answer.status_code == refused and answer.headers["content-type"].startswith("application/problem+json")
            counts[str(refused)] += ok
        if not ok:
            wrong.append(f"{op} {method} {path} with {headers or 'no key'}: {answer.status_code} {answer.text[:160]}")

    for op, method, path in ops:
        needs = NEEDS[op]
        assert spec["paths"][_template(spec, op)][method.lower()]["x-petrel-permissions"] == [n.text() for n in needs]
        await expect(op, method, path, {}, 401)
        await expect(op, method, path, bearer("ptk_0123456789ab_" + "A" * 43), 401)
        await expect(op, method, path, revoked, 401)
        if any(need.param is not None or need.kind == "cluster" for need in needs):
            await expect(op, method, path, elsewhere, 403)
        lacking = lacking_grants(needs)
        if lacking:
            await expect(op, method, path, await make_key(gateway, admin_key, *lacking), 403)
        await expect(op, method, path, await make_key(gateway, admin_key, *exact_grants(needs)), None)
    assert not wrong, "\n".join(wrong)
    assert counts["401"] == 3 * len(ops)
    print(f"\n{len(ops)} operations: {counts}")


def _template(spec: dict[str, Any], operation_id: str) -> str:
    return next(str(p) for p, ms in spec["paths"].items() for m in ms.values() if m.get("operationId") == operation_id)
