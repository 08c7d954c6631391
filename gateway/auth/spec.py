"""The spec declares the bearer scheme, which calls need it, and the `Retry-After` of their 429s.

The 401, 403 and 429 problems themselves are among every public operation's
(gateway.edge.problems), documented with the others.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from gateway.auth.key_check import OPEN_PATHS

SCHEME = "apiKey"


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
        for path, operations in spec.get("paths", {}).items():
            for operation in operations.values():
                if path in OPEN_PATHS:
                    operation["security"] = []
                    continue
                responses = operation.get("responses", {})
                if "429" in responses:
                    responses["429"].setdefault("headers", {})["Retry-After"] = {
                        "description": "seconds to wait",
                        "schema": {"type": "integer"},
                    }
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
