"""A PatientClient: a gateway client that outlasts a gateway (or broker) being killed and restarted.

Every call is repeated, exactly as it was (the same `Idempotency-Key` for a send),
after any failure: no answer, a 5xx, a 404 while routes come back, a 409 while an
earlier attempt is still pending. Only a 2xx counts as an answer; a 400/422 is the
caller's mistake and is returned at once; anything else after `give_up_s` is None.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

BACKOFF_S = (0.05, 0.1, 0.2, 0.4, 0.5)
FINAL = {400, 401, 403, 422}


@dataclass(slots=True)
class PatientClient:
    client: httpx.AsyncClient
    operations: Counter[str]
    last_errors: dict[str, str] = field(default_factory=dict)
    """the last failure of each operation, for the report"""
    gave_up: Counter[str] = field(default_factory=Counter)
    """calls left unanswered, by operation and last failure (status and problem type, or exception)"""

    async def call(self, operation: str, method: str, path: str, **options: Any) -> httpx.Response | None:
        answer, _ = await self.call_counted(operation, method, path, **options)
        return answer

    async def call_counted(
        self,
        operation: str,
        method: str,
        path: str,
        *,
        give_up_s: float,
        json: Any = None,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[httpx.Response | None, int]:
        """The answer (None when there was none in time) and how many tries it took."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + give_up_s
        why = ""
        for tries in range(1_000_000):
            self.operations[operation] += 1
            try:
                answer = await self.client.request(method, path, json=json, headers=headers, timeout=timeout)
            except httpx.HTTPError as exc:
                self.last_errors[operation] = f"{type(exc).__name__}: {exc}"
                why = type(exc).__name__
            else:
                if answer.is_success or answer.status_code in FINAL:
                    return answer, tries + 1
                self.last_errors[operation] = f"{answer.status_code} {answer.text[:300]}"
                why = f"{answer.status_code} {_problem_type(answer)}"
            if loop.time() >= deadline:
                if give_up_s > 0:  # a receive tries once: its failures are not losses
                    self.gave_up[f"{operation}: {why}"] += 1
                return None, tries + 1
            await asyncio.sleep(BACKOFF_S[min(tries, len(BACKOFF_S) - 1)])
        return None, 0


def _problem_type(answer: httpx.Response) -> str:
    try:
        return str(answer.json().get("type", "")).rsplit("/", 1)[-1]
    except ValueError:
        return ""
