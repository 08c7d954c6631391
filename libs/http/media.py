"""Which media types a request body may have: 415 for any other, answered before the body is read.

A body (a Content-Length above 0, or a chunked one) must say what it is, and be what
its route takes: JSON (`application/json` or an `application/*+json` type, UTF-8) unless
the route declares other types in its spec, as the broker's binary routes declare
`application/octet-stream` (the record codec). The declaration is the route's
`openapi_extra` request body, so the spec and the check never disagree:

    @router.post("/messages", openapi_extra={"requestBody": {"content": {BINARY: {...}}}})

This keeps a web page in a developer's browser from posting a `text/plain` or form
body (a CORS "simple request", sent without asking) to a service on loopback.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi.routing import iter_route_contexts
from starlette.routing import BaseRoute, compile_path
from starlette.types import Scope

from libs.errors import UnsupportedMediaType
from libs.http.guards import HTTP_ONLY, Refusal

JSON_MEDIA_TYPE = "application/json"
JSON_ONLY = (JSON_MEDIA_TYPE,)
UTF8 = frozenset({"utf-8", "utf8"})


@dataclass(frozen=True, slots=True)
class MediaType:
    """A Content-Type header's type (lowercase, no parameters) and its charset, if it names one."""

    essence: str
    charset: str | None

    @classmethod
    def parse(cls, header: str) -> MediaType:
        known = _PARSED.get(header)
        if known is None:
            known = cls._parse(header)
            if len(_PARSED) < _PARSED_MAX:
                _PARSED[header] = known
        return known

    @classmethod
    def _parse(cls, header: str) -> MediaType:
        essence, *parameters = header.split(";")
        charset = None
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "charset":
                charset = value.strip().strip('"').lower()
        return cls(essence.strip().lower(), charset)

    @property
    def is_json(self) -> bool:
        return self.essence == JSON_MEDIA_TYPE or (
            self.essence.startswith("application/") and self.essence.endswith("+json")
        )


_PARSED: dict[str, MediaType] = {}
_PARSED_MAX = 256
"""Content-Type values already parsed: a service sees a handful, and parses each on every request otherwise."""


def has_body(scope: Scope) -> bool:
    """Whether the request carries a body: a Content-Length above 0, or a Transfer-Encoding (chunked)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


def content_type(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return str(value.decode("latin-1"))
    return None


def declared_media_types(route: Any) -> tuple[str, ...]:
    """The request body types the route's spec declares; JSON when it declares none."""
    extra = getattr(route, "openapi_extra", None) or {}
    content = extra.get("requestBody", {}).get("content", {})
    return tuple(content) or JSON_ONLY


@dataclass(frozen=True, slots=True)
class _Declared:
    """A route that takes bodies other than JSON: its methods, its path (as a pattern) and its types."""

    methods: frozenset[str]
    path: re.Pattern[str]
    types: tuple[str, ...]

    def matches(self, scope: Scope) -> bool:
        return scope["method"] in self.methods and self.path.match(scope["path"]) is not None


class MediaTypeCheck:
    """Refuses (415) a body whose Content-Type its route does not take, before any of it is read.

    `routes`: the app's routes (read when the first request comes, and again when more
    were added); only those declaring types other than JSON are matched per request.
    """

    scopes = HTTP_ONLY

    def __init__(self, routes: Sequence[BaseRoute]) -> None:
        self.routes = routes
        self._seen = -1
        self._other: list[_Declared] = []

    async def refusal(self, scope: Scope) -> Refusal | None:
        if not has_body(scope):
            return None
        refused = self._refusal(scope, content_type(scope))
        return None if refused is None else Refusal(refused)

    def _refusal(self, scope: Scope, header: str | None) -> UnsupportedMediaType | None:
        accepted = self._accepted(scope)
        where = f"{scope['method']} {scope['path']}"
        if header is None:
            return UnsupportedMediaType(
                f"the body has no Content-Type; {where} takes {_either(accepted)}", accepted=list(accepted)
            )
        sent = MediaType.parse(header)
        if sent.is_json and JSON_MEDIA_TYPE in accepted:
            if sent.charset is None or sent.charset in UTF8:
                return None
            return UnsupportedMediaType(
                f"the body is {header!r}; JSON bodies are UTF-8", sent=header, accepted=list(accepted)
            )
        if sent.essence in accepted:
            return None
        return UnsupportedMediaType(
            f"the body is {header!r}; {where} takes {_either(accepted)}", sent=header, accepted=list(accepted)
        )

    def _accepted(self, scope: Scope) -> tuple[str, ...]:
        if len(self.routes) != self._seen:
            self._seen = len(self.routes)
            self._other = [
                _Declared(frozenset(route.methods or ()), compile_path(route.path)[0], types)
                for route in iter_route_contexts(self.routes)
                if route.path is not None and (types := declared_media_types(route)) != JSON_ONLY
            ]
        for route in self._other:
            if route.matches(scope):
                return route.types
        return JSON_ONLY


def _either(types: Iterable[str]) -> str:
    return " or ".join(types)
