"""WebhookEndpoint: the tests' own push receiver, served on loopback, that verifies and measures.

Each POST is verified with the Standard Webhooks reference implementation (the
`standardwebhooks` package, not Petrel's own libs.webhooks) and recorded with
its headers and body. A test decides each answer (`answer`), and reads what
the endpoint saw: the deliveries in arrival order, how many were in flight at
once at most, when each started.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request, Response
from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass(frozen=True, slots=True)
class Delivery:
    headers: dict[str, str]
    body: bytes
    started: float
    """time.monotonic() when the request arrived"""
    verified: bool

    @property
    def message_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def attempt(self) -> int:
        return int(self.headers["petrel-delivery-attempt"])

    @property
    def handle(self) -> str:
        return self.headers["petrel-receipt-handle"]

    @property
    def data(self) -> dict[str, Any]:
        """A standard-webhooks payload's message fields."""
        payload: dict[str, Any] = json.loads(self.body)
        return dict(payload["data"])

    @property
    def text(self) -> str:
        return str(self.data["body"])


@dataclass(frozen=True, slots=True)
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """seconds before answering"""


Decide = Callable[[Delivery], Answer | Awaitable[Answer]]


class WebhookEndpoint:
    def __init__(self, secret: str | None = None) -> None:
        self.secret = secret
        self.answer: Decide = lambda _: Answer()
        self.deliveries: list[Delivery] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/hook")
        async def hook(request: Request) -> Response:
            body = await request.body()
            delivery = Delivery(dict(request.headers), body, time.monotonic(), self._verified(body, request))
            with self._lock:
                self.deliveries.append(delivery)
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                answer = self.answer(delivery)
                if not isinstance(answer, Answer):
                    answer = await answer
                if answer.delay:
                    await asyncio.sleep(answer.delay)
                return Response(status_code=answer.status, headers=answer.headers)
            finally:
                with self._lock:
                    self.in_flight -= 1

        return app

    def _verified(self, body: bytes, request: Request) -> bool:
        if self.secret is None:
            return False
        try:
            Webhook(self.secret).verify(body, dict(request.headers))
        except WebhookVerificationError:
            return False
        return True

    def of(self, message_id: str) -> list[Delivery]:
        with self._lock:
            return [d for d in self.deliveries if d.message_id == message_id]

    def seen(self) -> set[str]:
        with self._lock:
            return {d.message_id for d in self.deliveries}

    def reset(self, secret: str | None = None) -> None:
        with self._lock:
            self.deliveries.clear()
            self.max_in_flight = 0
            if secret is not None:
                self.secret = secret
