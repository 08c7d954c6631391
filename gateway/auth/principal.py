"""Principal: who is calling (an API key, or everyone when auth is off) and what it may do."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from starlette.requests import Request

from libs.auth.grants import UNRESTRICTED, Action, Policy, ResourceKind, needed_grant
from libs.errors import Forbidden, NotFound, Unauthorized

SCOPE_KEY: Final = "petrel.principal"
"""Where KeyCheck (gateway.auth.key_check) puts the caller in the request's scope (its own, never shared)."""


@dataclass(frozen=True, slots=True)
class Principal:
    key_id: str | None
    """None when auth is off"""
    name: str
    policy: Policy
    rate_per_second: float = 0.0
    """0: unlimited"""

    def may(self, actions: Iterable[Action], kind: ResourceKind, name: str = "*") -> bool:
        return any(self.policy.permits(action, kind, name) for action in actions)

    def may_all(self, actions: Iterable[Action], kind: Literal["topic", "group"]) -> bool:
        """May do one of `actions` on every name of `kind` (a handler then need not look the resource up)."""
        return any(self.policy.covers_all(action, kind) for action in actions)

    def require(self, actions: tuple[Action, ...], kind: ResourceKind, name: str = "*") -> None:
        """Forbidden (403) naming the grant that is missing, unless one of `actions` is permitted."""
        if self.may(actions, kind, name):
            return
        needed = [needed_grant(action, kind, name) for action in actions]
        what = f"{kind} {name!r}" if kind != "cluster" else "the whole cluster"
        verbs = " or ".join(action.verb for action in actions)
        denied = [str(g) for g in self.policy.deny for a in actions if g.covers(a, kind, name)]
        why = f"its deny grant {denied[0]} forbids it" if denied else f"it needs {' or '.join(needed)}"
        raise Forbidden(f"key {self.describe()} may not {verbs} {what}: {why}", required=needed)

    def require_some(self, actions: tuple[Action, ...]) -> None:
        """Forbidden unless the key holds some grant of one of `actions` (the resource is known only later)."""
        if any(self.policy.may_ever(action) for action in actions):
            return
        needed = [action.value for action in actions]
        raise Forbidden(
            f"key {self.describe()} holds no {' or '.join(needed)} grant, which this call needs", required=needed
        )

    def describe(self) -> str:
        return f"{self.name!r} ({self.key_id})" if self.key_id else repr(self.name)


EVERYONE: Final = Principal(key_id=None, name="anonymous (auth is off)", policy=UNRESTRICTED)


def principal_of(request: Request) -> Principal:
    """The caller KeyCheck found; a request that did not pass it is refused, never let through."""
    principal = request.scope.get(SCOPE_KEY)
    if not isinstance(principal, Principal):
        raise Unauthorized("the request was not authenticated")
    return principal


def authorize(request: Request, actions: tuple[Action, ...], kind: ResourceKind, name: str) -> None:
    """For a resource the caller names outside the path (the body's producer group): 403 unless permitted."""
    principal_of(request).require(actions, kind, name)


def reveal(request: Request, actions: tuple[Action, ...], kind: ResourceKind, name: str, missing: NotFound) -> None:
    """For a resource found late, by an id (a message's topic, a transaction's): `missing`, the 404 of an id that
    is not there, unless permitted. Called before any answer that depends on the resource's state. It is `require`
    (so it names the resource it checks, as every check does) with its 403 answered as that 404."""
    try:
        principal_of(request).require(actions, kind, name)
    except Forbidden:
        raise missing from None
