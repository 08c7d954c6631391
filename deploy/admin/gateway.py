"""GatewayCalls: the admin commands' HTTP client of the public `/v1` API (PETREL_GATEWAY, PETREL_API_KEY)."""

from __future__ import annotations

import os
from typing import Any

import httpx

DEFAULT_GATEWAY = "http://127.0.0.1:8080"


class AdminError(Exception):
    """A call that did not work, said in one line for the operator (the command exits 1 with it)."""


class GatewayCalls:
    def __init__(self, base: str | None = None, key: str | None = None, timeout: float = 10.0) -> None:
        self.base = (base or os.environ.get("PETREL_GATEWAY") or DEFAULT_GATEWAY).rstrip("/")
        key = key if key is not None else os.environ.get("PETREL_API_KEY")
        self.has_key = bool(key)
        headers = {"authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.Client(base_url=self.base, headers=headers, timeout=timeout, trust_env=False)

    def __enter__(self) -> GatewayCalls:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def get(self, path: str, **params: Any) -> Any:
        return self._call("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any) -> Any:
        return self._call("POST", path, json=body)

    def _call(self, method: str, path: str, **options: Any) -> Any:
        try:
            answer = self.client.request(method, path, **options)
        except httpx.TransportError as exc:
            raise AdminError(
                f"the gateway at {self.base} did not answer ({exc}); is the cluster up? "
                "Set PETREL_GATEWAY to its address (petrel up prints it)"
            ) from exc
        if answer.status_code == 401:
            raise AdminError(f"{_problem(answer)}; {self._key_advice()}")
        if answer.status_code == 403:
            raise AdminError(
                f"{_problem(answer)}; the key in PETREL_API_KEY lacks that grant: use a key that holds it "
                "(petrel keys create --allow ...)"
            )
        if answer.is_error:
            raise AdminError(_problem(answer))
        try:
            return answer.json()
        except ValueError:
            raise AdminError(
                f"{self.base} answered {answer.status_code} but not with JSON: is it a Petrel gateway?"
            ) from None

    def _key_advice(self) -> str:
        if not self.has_key:
            return "the gateway needs an API key: set PETREL_API_KEY to one (petrel keys create makes it)"
        return "the gateway does not accept the key in PETREL_API_KEY (revoked, or not this cluster's): set another"


def _problem(answer: httpx.Response) -> str:
    try:
        problem = answer.json()
        return f"{answer.status_code} {problem.get('title', '')}: {problem.get('detail', '')}".rstrip(": ")
    except ValueError:
        return f"{answer.status_code}: {answer.text[:200]}"
