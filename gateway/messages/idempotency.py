"""IdempotencyKeys: `Idempotency-Key` on sends, kept in Redis for 24 hours.

A key is a record (its request's fingerprint, the message ids of its messages,
and where each was sent) plus a short lease held by the request working on it:

- first request: the lease is taken (SET NX), then the record created with fresh
  message ids; the send runs under the lease.
- before each put, the broker each message goes to is written to the record
  (only while the lease is still ours), so whatever happens next, a later
  request knows where the message may be. The records carry DEDUP: that broker
  answers with the copy it holds instead of storing a second one.
- answered: a send whose every message has a settled outcome stores its answer
  (`done`); repeats get it back. A send that failed before anything could be
  stored releases the key. A send with an unsettled outcome (a flush timeout, a
  broker that got the put but did not answer) keeps its record and drops its
  lease: a repeat resumes it at once, same ids, same brokers.
- a repeat while the lease is held: 409 (the first is in flight). The request renews
  its lease every third of it while it runs (`kept`), however long its puts wait; a
  gateway that died mid-request stops renewing, its lease expires (`LEASE_MS`, 3 s),
  then a repeat resumes. A gateway paused past its lease is taken over: its later
  writes to the record fail (guarded by the lease's owner), the brokers keep one copy.
- a repeat with a different payload: 422.

So a kill -9 of the gateway at any await leaves one of: no record (nothing sent),
a record without brokers (nothing sent), a record naming brokers (a repeat goes
there, and the broker keeps one copy), or the answer.

A key is scoped by the API key that sent it and by its scope (`send:<topic>`,
`batch:<topic>`): another producer using the same Idempotency-Key on the same topic
has a record of its own, so it neither gets the first one's answer nor waits on its
lease. With auth off every caller is the same one, and a key is scoped by topic only
(`record_key`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError

from libs import jsonutil
from libs.errors import IdempotencyConflict, PetrelError, ServiceUnavailable, ValidationFailed
from libs.tasks import cancelled

TTL_SECONDS = 24 * 3600
LEASE_MS = 3_000
MAX_KEY_LENGTH = 255
T = TypeVar("T")

# Write the record only while the lease is still ours, and renew the lease.
_GUARDED_SET = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
"""
_GUARDED_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
_GUARDED_DEL = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
if ARGV[2] == '1' then redis.call('DEL', KEYS[1]) end
redis.call('DEL', KEYS[2])
return 1
"""


def record_key(scope: str, key: str, api_key_id: str | None) -> str:
    """Where a key's record is in Redis: per API key (ids are 12 hex digits; `key:` is never a scope) and scope.

    With auth off, where every release before API-key scoping kept it (an upgrade keeps those records); with
    auth on, records kept before are not read (a repeat of a send made before the upgrade is sent anew).
    """
    if api_key_id is None:
        return f"petrel:idempotency:{scope}:{key}"
    return f"petrel:idempotency:key:{api_key_id}:{scope}:{key}"


@dataclass(slots=True)
class Claim:
    redis_key: str
    fingerprint: str
    owner: str
    replay: dict[str, Any] | None
    """The first request's answer, when this is a repeat of a finished one."""
    message_ids: list[str] = field(default_factory=list)
    """One per message of the request, fixed by the first attempt."""
    fixed: dict[str, str] = field(default_factory=dict)
    """message id -> the broker an earlier attempt sent it to (it may be stored there)."""
    sent: dict[str, str] = field(default_factory=dict)
    """message id -> broker, as this request sends them (written before each put)."""
    keys: IdempotencyKeys | None = None

    @property
    def lease_key(self) -> str:
        return self.redis_key + ":lease"

    lost: bool = False
    """A write of where messages go failed (taken over, or Redis gone): the record may name puts already made."""

    async def record(self, targets: Mapping[str, str]) -> None:
        """Note where messages go before they are put (gateway.messages.sender.Pins)."""
        assert self.keys is not None
        self.sent.update(targets)
        try:
            await self.keys.save(self)
        except PetrelError:
            self.lost = True
            raise


class IdempotencyKeys:
    def __init__(self, client: aioredis.Redis, lease_ms: int = LEASE_MS) -> None:
        self.client = client
        self.lease_ms = lease_ms
        self.renewals = 0

    async def claim(
        self, scope: str, key: str, payload: bytes, count: int, new_id: Callable[[], str], *, api_key_id: str | None
    ) -> Claim:
        """Take the key of API key `api_key_id` (None: auth is off) for a request of `count` messages (ids made by
        `new_id` when the key is new)."""
        if not key or len(key) > MAX_KEY_LENGTH:
            raise ValidationFailed(f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} characters")
        redis_key = record_key(scope, key, api_key_id)
        claim = Claim(redis_key, hashlib.sha256(payload).hexdigest(), "", None, keys=self)
        claim.owner = secrets.token_hex(8)
        stored = await self._redis(self.client.get(claim.redis_key))
        if stored is not None and self._replayed(claim, key, stored):
            return claim
        if not await self._redis(self.client.set(claim.lease_key, claim.owner, nx=True, px=self.lease_ms)):
            raise IdempotencyConflict(f"a request with Idempotency-Key {key!r} is still in progress; retry shortly")
        ids = [new_id() for _ in range(count)]
        fresh = {"state": "pending", "fingerprint": claim.fingerprint, "ids": ids}
        if await self._redis(self.client.set(claim.redis_key, jsonutil.dumps(fresh), nx=True, ex=TTL_SECONDS)):
            claim.message_ids = ids
            return claim
        stored = await self._redis(self.client.get(claim.redis_key))
        if stored is None or self._replayed(claim, key, stored):  # finished (or expired) meanwhile
            await self._redis(self.client.delete(claim.lease_key))
            if claim.replay is not None:
                return claim
            return await self.claim(scope, key, payload, count, new_id, api_key_id=api_key_id)
        record = jsonutil.loads(stored)
        claim.message_ids = list(record["ids"])
        claim.fixed = dict(record.get("sent") or {})
        claim.sent = dict(claim.fixed)
        return claim

    def _replayed(self, claim: Claim, key: str, stored: bytes) -> bool:
        """Check a stored record against this request; True when it holds the answer (set as claim.replay)."""
        record = jsonutil.loads(stored)
        if record["fingerprint"] != claim.fingerprint:
            raise ValidationFailed(
                f"Idempotency-Key {key!r} was used with a different request body; use a new key for a new message"
            )
        if record["state"] == "done":
            claim.replay = record["answer"]
            return True
        return False

    async def save(self, claim: Claim) -> None:
        """Write where the messages were sent; IdempotencyConflict when another request took the key over."""
        record = {"state": "pending", "fingerprint": claim.fingerprint, "ids": claim.message_ids, "sent": claim.sent}
        await self._guarded(_GUARDED_SET, claim, jsonutil.dumps(record).decode(), str(self.lease_ms))

    async def complete(self, claim: Claim, answer: dict[str, Any]) -> None:
        done = {"state": "done", "fingerprint": claim.fingerprint, "answer": answer}
        await self._guarded(_GUARDED_SET, claim, jsonutil.dumps(done).decode(), "1")

    @contextlib.asynccontextmanager
    async def kept(self, claim: Claim) -> AsyncIterator[None]:
        """The claim's lease renewed every third of it while the block runs (a slow put keeps its key; a dead
        gateway's lease ends a lease after its last renewal). Renewing stops once the lease is another's.

        Renewing stops on a flag as well as on cancellation: a cancellation landing inside the Redis call may come
        out of it as a Redis error (seen: the renewal went on for the test's whole 120 s, and the request with it).
        """
        done = asyncio.Event()
        renewing = asyncio.create_task(self._renew(claim, done), name="idempotency-lease")
        try:
            yield
        finally:
            done.set()
            await cancelled(renewing)

    async def _renew(self, claim: Claim, done: asyncio.Event) -> None:
        while not done.is_set():
            await asyncio.sleep(self.lease_ms / 3000)
            if done.is_set():
                return
            try:
                call = self.client.eval(_GUARDED_RENEW, 1, claim.lease_key, claim.owner, str(self.lease_ms))
                if not await cast(Awaitable[int], call):
                    return  # taken over: the guarded writes after this say so
                self.renewals += 1
            except (aioredis.RedisError, OSError):
                continue  # Redis away for a moment: the next renewal may still be in time

    async def suspend(self, claim: Claim) -> None:
        """The outcome is not settled: keep the record (ids, brokers) and let a repeat resume it now."""
        await self._guarded(_GUARDED_DEL, claim, "0")

    async def release(self, claim: Claim) -> None:
        """Nothing was stored: forget the key."""
        await self._guarded(_GUARDED_DEL, claim, "1")

    async def _guarded(self, script: str, claim: Claim, *args: str) -> None:
        call = self.client.eval(script, 2, claim.redis_key, claim.lease_key, claim.owner, *args)
        done = await self._redis(cast(Awaitable[int], call))
        if not done:
            raise IdempotencyConflict(
                "another request with the same Idempotency-Key took over this one (it took longer than "
                f"{self.lease_ms} ms); its answer is the one that counts"
            )

    @staticmethod
    async def _redis(call: Awaitable[T]) -> T:
        try:
            return await call
        except AuthenticationError as exc:
            raise ServiceUnavailable(
                f"the idempotency key store (Redis) refused the gateway's credentials (PETREL_REDIS_URL): {exc}"
            ) from exc
        except (aioredis.RedisError, OSError) as exc:
            raise ServiceUnavailable(f"the idempotency key store (Redis) did not answer: {exc}") from exc
