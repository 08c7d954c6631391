"""IdempotencyKeys: `Idempotency-Key` on sends, kept in Redis for 24 hours.

- First request with a key: the key is claimed (SET NX) as pending with the
  payload's fingerprint, the send runs, and its answer is stored under the key.
- A repeat with the same payload gets the stored answer (no second message).
- A repeat with a different payload: 422. A repeat while the first is still
  being sent: 409. A send that failed releases the key, so it can be retried.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from libs import jsonutil
from libs.errors import IdempotencyConflict, ServiceUnavailable, ValidationFailed

TTL_SECONDS = 24 * 3600
MAX_KEY_LENGTH = 255


@dataclass(frozen=True, slots=True)
class Claim:
    redis_key: str
    fingerprint: str
    replay: dict[str, Any] | None
    """The first request's answer, when this is a repeat of a finished one."""


class IdempotencyKeys:
    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client

    async def claim(self, scope: str, key: str, payload: bytes) -> Claim:
        if not key or len(key) > MAX_KEY_LENGTH:
            raise ValidationFailed(f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} characters")
        redis_key = f"petrel:idempotency:{scope}:{key}"
        fingerprint = hashlib.sha256(payload).hexdigest()
        pending = jsonutil.dumps({"state": "pending", "fingerprint": fingerprint})
        try:
            if await self.client.set(redis_key, pending, nx=True, ex=TTL_SECONDS):
                return Claim(redis_key, fingerprint, None)
            stored = await self.client.get(redis_key)
        except (aioredis.RedisError, OSError) as exc:
            raise ServiceUnavailable(f"the idempotency key store (Redis) did not answer: {exc}") from exc
        if stored is None:  # expired or released between the two calls: claim again
            return await self.claim(scope, key, payload)
        record = jsonutil.loads(stored)
        if record["fingerprint"] != fingerprint:
            raise ValidationFailed(
                f"Idempotency-Key {key!r} was used with a different request body; use a new key for a new message"
            )
        if record["state"] == "pending":
            raise IdempotencyConflict(f"a request with Idempotency-Key {key!r} is still in progress; retry shortly")
        return Claim(redis_key, fingerprint, record["answer"])

    async def complete(self, claim: Claim, answer: dict[str, Any]) -> None:
        done = jsonutil.dumps({"state": "done", "fingerprint": claim.fingerprint, "answer": answer})
        await self.client.set(claim.redis_key, done, ex=TTL_SECONDS)

    async def release(self, claim: Claim) -> None:
        await self.client.delete(claim.redis_key)
