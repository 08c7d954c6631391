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
    """Every error is a Problem, but readiness's 503: the Readiness body, whose checks say what is wrong."""
    for method, path, operation in operations(json.loads(SPECS[name])):
        for code, response in operation["responses"].items():
            if (path, code) == ("/readyz", "503"):
                assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Readiness"}
            elif code.startswith(("4", "5")):
                assert list(response["content"]) == ["application/problem+json"], f"{name} {method} {path} {code}"


def test_every_public_operation_documents_its_problems() -> None:
    """Each /v1 operation names the statuses it answers (no 4XX/5XX ranges), with the problem types of each."""
    spec = json.loads(SPECS["gateway.json"])
    for method, path, operation in operations(spec):
        if not path.startswith("/v1/"):
            continue
        codes = set(operation["responses"])
        assert not codes & {"4XX", "5XX", "default"}, f"{method} {path}: ranges {sorted(codes)}"
        assert {"500", "503"} <= codes, f"{method} {path}: {sorted(codes)}"
        for code in codes - {"200", "201", "204"}:
            assert "`" in operation["responses"][code]["description"], f"{method} {path} {code}: no problem type"


def test_name_parameters_carry_the_rules_the_server_enforces() -> None:
    """Path names are documented with libs.names's own pattern and length, so clients and fuzzers see them."""
    from libs.names import MAX_NAME_LENGTH, NAME_PATTERN

    spec = json.loads(SPECS["gateway.json"])
    named = [
        (method, path, p["schema"])
        for method, path, operation in operations(spec)
        for p in operation.get("parameters", [])
        if p["in"] == "path" and p["name"] == "group"
    ]
    assert named
    for method, path, schema in named:
        assert (schema["pattern"], schema["maxLength"]) == (NAME_PATTERN, MAX_NAME_LENGTH), f"{method} {path}"


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
