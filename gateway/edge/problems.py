"""The problems every public operation may answer, documented in one place: added to each `/v1` operation's spec.

A route documents the problems of its own work (`responses=problem_responses(...)`);
`document_public_problems` adds these to each, so a status both name lists the types of both.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import FastAPI

from libs.errors import (
    CrossSiteRequest,
    Forbidden,
    HostNotAllowed,
    MalformedBody,
    PayloadTooLarge,
    PetrelError,
    RateLimited,
    RequestHeaderTooLarge,
    ServiceUnavailable,
    Unauthorized,
    UnsupportedMediaType,
    UpstreamError,
)
from libs.problem import merge_problem_responses, problem_responses

PUBLIC_PREFIX: Final = "/v1/"
PUBLIC_PROBLEMS: Final[tuple[type[PetrelError], ...]] = (
    HostNotAllowed,  # a Host the gateway does not answer to, or a proxy before an open one (libs.http.site_guards)
    CrossSiteRequest,  # a browser's call for a page of another site
    Unauthorized,  # no valid API key (gateway.auth.key_check), before any route
    Forbidden,  # the key lacks a grant the operation needs (gateway.auth.needs)
    RateLimited,  # the key is over its rate
    UnsupportedMediaType,  # a body that is not JSON (libs.http.media)
    MalformedBody,  # JSON nested too deep (libs.http.json_shape)
    RequestHeaderTooLarge,  # the server's header bound (libs.http.connection_limits)
    PayloadTooLarge,  # the body limit applies to every request, before any route; so do JSON item counts
    PetrelError,  # an unexpected error
    UpstreamError,  # a broker or service answered what is not a problem
    ServiceUnavailable,  # no nameserver, no broker, or the push or timer service did not answer
)


def document_public_problems(app: FastAPI) -> None:
    """Every operation under PUBLIC_PREFIX documents PUBLIC_PROBLEMS besides its own."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = generate()
        common: dict[int | str, dict[str, Any]] = {str(s): r for s, r in problem_responses(*PUBLIC_PROBLEMS).items()}
        for path, operations in spec.get("paths", {}).items():
            if path.startswith(PUBLIC_PREFIX):
                for operation in operations.values():
                    operation["responses"] = merge_problem_responses(operation["responses"], common)
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
