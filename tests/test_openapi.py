"""The committed specs under openapi/ are what the code generates, and are SDK-friendly."""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from deploy.openapi import render_specs

OPENAPI_DIR = Path(__file__).resolve().parent.parent / "openapi"
SPECS = render_specs()
METHODS = {"get", "put", "post", "delete", "patch"}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_committed_spec_is_not_stale(name: str) -> None:
    committed = OPENAPI_DIR / name
    assert committed.exists(), f"openapi/{name} is missing: run `make openapi` and commit it"
    assert committed.read_text() == SPECS[name], f"openapi/{name} is stale: run `make openapi` and commit it"


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, item in spec["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_operation_ids_are_unique_camel_case(name: str) -> None:
    ids = [op["operationId"] for _, _, op in operations(json.loads(SPECS[name]))]
    assert len(ids) == len(set(ids)), f"duplicate operationIds in {name}: {ids}"
    for operation_id in ids:
        assert re.fullmatch(r"[a-z][A-Za-z0-9]+", operation_id), f"{name}: operationId {operation_id!r}"


def is_named(schema: dict[str, Any]) -> bool:
    if "$ref" in schema:
        return True
    options = schema.get("anyOf", [])
    return bool(options) and all("$ref" in o or o == {"type": "null"} for o in options)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_json_body_is_a_named_schema(name: str) -> None:
    for method, path, operation in operations(json.loads(SPECS[name])):
        bodies = [("request", operation.get("requestBody", {}).get("content", {}))]
        bodies += [(f"response {code}", r.get("content", {})) for code, r in operation["responses"].items()]
        for where, content in bodies:
            for media_type, body in content.items():
                if "json" in media_type:
                    assert is_named(body["schema"]), f"{name} {method} {path} {where}: inline schema {body['schema']}"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_schema_names_are_chosen_not_generated(name: str) -> None:
    """Generated clients name their classes after these: no `Body_put_topic_...`, no FastAPI 422 models."""
    for schema in json.loads(SPECS[name]).get("components", {}).get("schemas", {}):
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", schema), f"{name}: schema name {schema!r}"
        assert schema not in {"HTTPValidationError", "ValidationError"}, f"{name}: {schema} (errors are Problems)"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_request_bodies_are_not_nullable(name: str) -> None:
    """An optional body is `required: false` with a plain $ref: generated clients send `null` for `anyOf [X, null]`."""
    for method, path, operation in operations(json.loads(SPECS[name])):
        for media_type, body in operation.get("requestBody", {}).get("content", {}).items():
            if "json" in media_type:
                assert "$ref" in body["schema"], f"{name} {method} {path}: request body {body['schema']}"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_errors_are_documented_as_problem_json(name: str) -> None:
    for method, path, operation in operations(json.loads(SPECS[name])):
        for code, response in operation["responses"].items():
            if code.startswith(("4", "5")):
                assert list(response["content"]) == ["application/problem+json"], f"{name} {method} {path} {code}"


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in refs(value)]
    return []


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_schema_reference_resolves(name: str) -> None:
    spec = json.loads(SPECS[name])
    schemas = spec.get("components", {}).get("schemas", {})
    dangling = sorted({r for r in refs(spec) if r.removeprefix("#/components/schemas/") not in schemas})
    assert not dangling, f"{name} refers to schemas it does not define (register them): {dangling}"
