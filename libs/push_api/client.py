"""PushClient: the async client of the push service's internal API (`/internal/subscriptions`), for the gateway.

The push service's own errors (subscription-not-found, a refused endpoint URL,
...) cross unchanged (libs.http.client rebuilds them); a push service that does
not answer is ServiceUnavailable naming its address.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from libs import jsonutil
from libs.errors import ServiceUnavailable
from libs.http.client import JSON_TYPE, InternalClient
from libs.http.paths import internal_path
from libs.push_api.schemas import (
    PushAttempts,
    RotateSecretRequest,
    Subscription,
    SubscriptionList,
    SubscriptionRequest,
)

PREFIX = "/internal/subscriptions"


class PushClient:
    def __init__(self, internal: InternalClient, address: str) -> None:
        """`address`: host:port of the push service."""
        self.internal = internal
        self.address = address

    async def put(self, group: str, topic: str, request: SubscriptionRequest) -> tuple[Subscription, bool]:
        """The subscription as stored (its secret shown when it was set), and whether it was created."""
        body = jsonutil.dumps(request.model_dump(mode="json", exclude_unset=True))
        with self._naming():
            answer = await self.internal.binary(
                "PUT", self._url(_subscription(group, topic)), body=body, content_type=JSON_TYPE
            )
        return Subscription.model_validate_json(answer.body), answer.status == 201

    async def get(self, group: str, topic: str) -> Subscription:
        return Subscription.model_validate(await self._json("GET", _subscription(group, topic)))

    async def list(self, group: str | None = None) -> SubscriptionList:
        """Every subscription (of `group`), by group then topic."""
        params = None if group is None else {"group": group}
        return SubscriptionList.model_validate(await self._json("GET", "", params=params))

    async def delete(self, group: str, topic: str) -> None:
        await self._json("DELETE", _subscription(group, topic))

    async def pause(self, group: str, topic: str) -> Subscription:
        return Subscription.model_validate(
            await self._json("POST", _subscription(group, topic, "/pause"), idempotent=True)
        )

    async def resume(self, group: str, topic: str) -> Subscription:
        return Subscription.model_validate(
            await self._json("POST", _subscription(group, topic, "/resume"), idempotent=True)
        )

    async def rotate_secret(self, group: str, topic: str, request: RotateSecretRequest) -> Subscription:
        """The new secret is in the answer; a rotation is not repeated when the call fails midway."""
        body = request.model_dump(mode="json")
        return Subscription.model_validate(
            await self._json("POST", _subscription(group, topic, "/rotate-secret"), body)
        )

    async def attempts(self, group: str, topic: str, limit: int) -> PushAttempts:
        answer = await self._json("GET", _subscription(group, topic, "/attempts"), params={"limit": limit})
        return PushAttempts.model_validate(answer)

    async def _json(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        params: Mapping[str, str | int] | None = None,
        idempotent: bool | None = None,
    ) -> Any:
        with self._naming():
            return await self.internal.json(method, self._url(path), body=body, params=params, idempotent=idempotent)

    def _url(self, path: str) -> str:
        return f"http://{self.address}{PREFIX}{path}"

    @contextlib.contextmanager
    def _naming(self) -> Iterator[None]:
        try:
            yield
        except ServiceUnavailable as exc:
            if "request_sent" not in exc.extensions:  # the push service's own 503: it did answer
                raise
            raise ServiceUnavailable(
                f"the push service at {self.address} did not answer: {exc.detail}", **exc.extensions
            ) from exc


def _subscription(group: str, topic: str, action: str = "") -> str:
    """The path of a subscription (or of an action on it) below PREFIX, its names quoted."""
    return internal_path("/{group}/{topic}", group=group, topic=topic) + action
