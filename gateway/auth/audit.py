"""Audit events: keys created and revoked, admin calls, and refused calls (401, 403, 429).

Refusals are what an attacker can make many of, so their events are bounded: at most
`max_per_second` a second per gateway are written (the `petrel_gateway_refused_total`
metric counts every one). Admin calls and key changes are always written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.types import Scope

if TYPE_CHECKING:
    from gateway.auth.principal import Principal

REFUSALS = frozenset({"unauthorized", "forbidden", "rate_limited"})


class RateBudget:
    """A token bucket: `max_per_second` takes a second, bursts of as many (refusal events written, key lookups)."""

    def __init__(self, max_per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = max_per_second
        self.tokens = max_per_second
        self.clock = clock
        self.stamp = clock()
        self.suppressed = 0

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        self.suppressed += 1
        return False


def audit_scope(scope: Scope, action: str, status: int, principal: Principal | None = None, **fields: Any) -> None:
    """Write an `audit` event for this request (when the gateway writes events)."""
    state = scope.get("state", {})
    events = state.get("events")
    if events is None:
        return
    if action in REFUSALS:
        budget = state.get("refusal_budget")
        if budget is not None and not budget.take():
            return
    client = scope.get("client")
    extra = {key: value for key, value in fields.items() if value is not None}
    if principal is not None and principal.key_id is not None:
        extra.setdefault("key_id", principal.key_id)
        extra.setdefault("key_name", principal.name)
    events.emit(
        "audit",
        action=action,
        status=status,
        method=scope.get("method"),
        path=scope.get("path"),
        remote=client[0] if client else None,
        **extra,
    )


def audit(request: Request, action: str, status: int, principal: Principal | None = None, **fields: Any) -> None:
    audit_scope(request.scope, action, status, principal, **fields)
