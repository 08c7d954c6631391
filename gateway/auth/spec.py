"""The spec declares the bearer scheme, which calls need it, and their 401, 403 and 429 answers."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from gateway.auth.middleware import OPEN_PATHS

SCHEME = "apiKey"
REFUSALS = {
    "401": "No valid API key: missing, malformed, unknown or revoked (application/problem+json)",
    "403": "The key lacks a grant this call needs; `required` lists the grants that would do (problem+json)",
    "429": "The key is over its rate; `Retry-After` says when to call again (application/problem+json)",
}


def document_security(app: FastAPI) -> None:
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = generate()
        components = spec.setdefault("components", {})
        components.setdefault("securitySchemes", {})[SCHEME] = {
            "type": "http",
            "scheme": "bearer",
            "description": "an API key, ptk_<key id>_<secret> (petrel keys create, POST /v1/keys)",
        }
        spec["security"] = [{SCHEME: []}]
        problem = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
        for path, operations in spec.get("paths", {}).items():
            for operation in operations.values():
                if path in OPEN_PATHS:
                    operation["security"] = []
                    continue
                responses = operation.setdefault("responses", {})
                for code, description in REFUSALS.items():
                    responses.setdefault(code, {"description": description, "content": problem})
                if "429" in responses:
                    responses["429"].setdefault("headers", {})["Retry-After"] = {
                        "description": "seconds to wait",
                        "schema": {"type": "integer"},
                    }
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
