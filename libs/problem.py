"""RFC 9457 problem details: the one place where exceptions become HTTP answers."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException
from starlette.responses import Response

from libs import jsonutil
from libs.errors import (
    PROBLEM_TYPE_BASE,
    InvalidRequest,
    MalformedBody,
    NotFound,
    PetrelError,
    ValidationFailed,
)

log = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"


class Problem(BaseModel):
    """An RFC 9457 problem detail; `type` is stable per kind of error."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None


PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": Problem, "description": "Client error (application/problem+json)"},
    "5XX": {"model": Problem, "description": "Server error (application/problem+json)"},
}
"""Pass as `responses=` to every router so the spec documents the error body."""

PROBLEM_SCHEMA_REF = "#/components/schemas/Problem"


def problem_responses(*problems: type[PetrelError]) -> dict[int | str, dict[str, Any]]:
    """`responses=` documenting the problems an operation may answer: each status, with the problem types it is.

    Plain content, no `model`: responses documented in several places merge by status (`merge_problem_responses`).
    """
    lines: dict[int, set[str]] = {}
    for problem in problems:
        lines.setdefault(problem.status, set()).add(f"- `{problem.slug}`: {problem.title}")
    return {status: _problem_response(found) for status, found in sorted(lines.items())}


def merge_problem_responses(
    responses: dict[int | str, dict[str, Any]], problems: dict[int | str, dict[str, Any]]
) -> dict[int | str, dict[str, Any]]:
    """`responses` with `problems` (of `problem_responses`) added: a status both document lists both's types.

    Statuses match whether they are ints (a route's `responses=`) or strings (a generated spec's).
    """
    merged = dict(responses)
    keys = {str(status): status for status in merged}
    for status, response in problems.items():
        key = keys.get(str(status), status)
        known = merged.get(key)
        if known is None:
            merged[key] = response
            continue
        lines = set(known.get("description", "").splitlines()) | set(response["description"].splitlines())
        merged[key] = _problem_response({line for line in lines if line})
    return dict(sorted(merged.items(), key=lambda item: str(item[0])))


def _problem_response(lines: set[str]) -> dict[str, Any]:
    return {
        "description": "\n".join(sorted(lines)),
        "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": PROBLEM_SCHEMA_REF}}},
    }


def problem_response(
    status: int, problem_type: str, title: str, detail: str | None, instance: str | None, **extensions: Any
) -> Response:
    body: dict[str, Any] = {"type": problem_type, "title": title, "status": status}
    if detail is not None:
        body["detail"] = detail
    if instance is not None:
        body["instance"] = instance
    body.update(extensions)
    return Response(jsonutil.dumps(body), status_code=status, media_type=PROBLEM_MEDIA_TYPE)


def entry_problem(exc: PetrelError) -> dict[str, Any]:
    """Why one entry of a batch (a message sent, a receipt handle acked) failed: the problem's fields.

    The one mapper from an error to a per-entry answer, for the gateway's and the broker's batches.
    """
    return {"type": exc.problem_type(), "title": exc.title, "status": exc.status, "detail": exc.detail}


def error_response(exc: PetrelError, instance: str | None = None) -> Response:
    return problem_response(exc.status, exc.problem_type(), exc.title, exc.detail, instance, **exc.extensions)


async def answer_error(request: Request, exc: Exception) -> Response:
    """The answer to an error a handler raised, as the handlers `install_problem_handlers` installs give it
    (for code that calls an endpoint outside FastAPI's exception middleware: libs.http.hot_routes)."""
    if isinstance(exc, PetrelError):
        return await _on_petrel_error(request, exc)
    if isinstance(exc, RequestValidationError):
        return await _on_validation_error(request, exc)
    if isinstance(exc, HTTPException):
        return await _on_http_exception(request, exc)
    return await _on_unexpected(request, exc)


def install_problem_handlers(app: FastAPI) -> None:
    app.add_exception_handler(PetrelError, _on_petrel_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _on_validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _on_http_exception)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _on_unexpected)


async def _on_petrel_error(request: Request, exc: PetrelError) -> Response:
    if exc.status >= 500:
        log.warning("%s %s -> %s: %s", request.method, request.url.path, exc.slug, exc.detail)
    return error_response(exc, request.url.path)


async def _on_validation_error(request: Request, exc: RequestValidationError) -> Response:
    errors = [_describe(e) for e in exc.errors()]
    if any(e["type"] == "json_invalid" for e in errors):
        detail = "the body is not valid JSON: " + "; ".join(e["message"] for e in errors)
        return error_response(MalformedBody(detail), request.url.path)
    detail = "; ".join(f"{e['location']}: {e['message']}" for e in errors)
    return error_response(ValidationFailed(detail, errors=errors), request.url.path)


def _describe(error: Any) -> dict[str, Any]:
    location = ".".join(str(part) for part in error.get("loc", ()))
    message = str(error.get("msg", "invalid"))
    if error.get("type") == "json_invalid":
        ctx = error.get("ctx") or {}
        position = error.get("loc", ())[-1:]
        if position and isinstance(position[0], int):  # FastAPI's own parse: loc ends at the position
            message = f"{ctx.get('error', message)} at position {position[0]}"
        else:  # pydantic-core: the message names line and column
            message = str(ctx.get("error", message))
    return {"location": location, "message": message, "type": str(error.get("type", ""))}


async def _on_http_exception(request: Request, exc: HTTPException) -> Response:
    if exc.status_code == 404:
        return error_response(NotFound(f"no route for {request.method} {request.url.path}"), request.url.path)
    if exc.status_code == 400:
        return error_response(InvalidRequest(str(exc.detail)), request.url.path)
    slug = {405: "method-not-allowed", 415: "unsupported-media-type"}.get(exc.status_code, "http-error")
    return problem_response(
        exc.status_code,
        PROBLEM_TYPE_BASE + slug,
        slug.replace("-", " ").capitalize(),
        str(exc.detail),
        request.url.path,
    )


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(
        PetrelError("an unexpected error occurred; the service log has the details"), request.url.path
    )
