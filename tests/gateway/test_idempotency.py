"""IdempotencyKeys against the real Redis on 127.0.0.1:6379."""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from gateway.messages.idempotency import IdempotencyKeys
from libs.errors import IdempotencyConflict, ServiceUnavailable, ValidationFailed
from libs.message import MessageIdFactory
from tests.support.waiting import eventually


def ids() -> Callable[[], str]:
    return MessageIdFactory().new_id


@pytest.fixture
async def keys() -> AsyncIterator[IdempotencyKeys]:
    client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
    yield IdempotencyKeys(client)
    await client.aclose()


async def test_a_repeat_while_the_first_is_in_flight_is_409(keys: IdempotencyKeys) -> None:
    key = str(uuid.uuid4())
    await keys.claim("send:t", key, b"payload", 1, ids(), api_key_id=None)
    with pytest.raises(IdempotencyConflict, match="still in progress"):
        await keys.claim("send:t", key, b"payload", 1, ids(), api_key_id=None)


async def test_a_finished_request_is_replayed_and_a_different_body_refused(keys: IdempotencyKeys) -> None:
    key = str(uuid.uuid4())
    claim = await keys.claim("send:t", key, b"payload", 1, ids(), api_key_id=None)
    await keys.complete(claim, {"message_id": "M1"})

    again = await keys.claim("send:t", key, b"payload", 1, ids(), api_key_id=None)
    assert again.replay == {"message_id": "M1"}
    with pytest.raises(ValidationFailed, match="different request body"):
        await keys.claim("send:t", key, b"other payload", 1, ids(), api_key_id=None)


async def test_a_failed_request_releases_its_key(keys: IdempotencyKeys) -> None:
    key = str(uuid.uuid4())
    await keys.release(await keys.claim("send:t", key, b"payload", 1, ids(), api_key_id=None))
    assert (await keys.claim("send:t", key, b"payload", 1, ids(), api_key_id=None)).replay is None


async def test_keys_are_scoped_per_topic(keys: IdempotencyKeys) -> None:
    key = str(uuid.uuid4())
    await keys.claim("send:a", key, b"payload", 1, ids(), api_key_id=None)
    assert (await keys.claim("send:b", key, b"payload", 1, ids(), api_key_id=None)).replay is None


async def test_keys_are_scoped_per_api_key(keys: IdempotencyKeys) -> None:
    """Another producer's same Idempotency-Key on the same topic neither waits on the first nor gets its answer."""
    key = str(uuid.uuid4())
    first = await keys.claim("send:t", key, b"payload", 1, ids(), api_key_id="0123456789ab")
    other = await keys.claim("send:t", key, b"another body", 1, ids(), api_key_id="ba9876543210")
    assert other.replay is None
    assert other.message_ids != first.message_ids
    await keys.complete(first, {"message_id": "M1"})
    await keys.complete(other, {"message_id": "M2"})

    again = await keys.claim("send:t", key, b"another body", 1, ids(), api_key_id="ba9876543210")
    assert again.replay == {"message_id": "M2"}
    anonymous = await keys.claim("send:t", key, b"payload", 1, ids(), api_key_id=None)
    assert anonymous.replay is None, "with auth off a key is the topic's, apart from every API key's"


async def test_redis_down_is_503_not_a_silent_send() -> None:
    client = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    try:
        with pytest.raises(ServiceUnavailable, match="idempotency key store"):
            await IdempotencyKeys(client).claim("send:t", "k", b"payload", 1, ids(), api_key_id=None)
    finally:
        await client.aclose()


async def test_a_request_resumed_after_its_lease_ended_keeps_its_ids_and_brokers() -> None:
    client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
    keys = IdempotencyKeys(client, lease_ms=50)
    key = str(uuid.uuid4())
    try:
        first = await keys.claim("send:t", key, b"payload", 2, ids(), api_key_id=None)
        await first.record({first.message_ids[0]: "broker-a"})
        # the gateway dies here (kill -9): nothing releases the key; its lease runs out
        await eventually(lambda: _lease_gone(client, first.lease_key), "the dead request's lease ran out")
        again = await keys.claim("send:t", key, b"payload", 2, ids(), api_key_id=None)
        assert again.replay is None
        assert again.message_ids == first.message_ids
        assert again.fixed == {first.message_ids[0]: "broker-a"}
        with pytest.raises(IdempotencyConflict, match="took over"):
            await first.record({first.message_ids[1]: "broker-b"})
    finally:
        await client.aclose()


async def test_an_unsettled_request_is_resumed_at_once(keys: IdempotencyKeys) -> None:
    key = str(uuid.uuid4())
    first = await keys.claim("send:t", key, b"payload", 1, ids(), api_key_id=None)
    await first.record({first.message_ids[0]: "broker-a"})
    await keys.suspend(first)

    again = await keys.claim("send:t", key, b"payload", 1, ids(), api_key_id=None)
    assert (again.message_ids, again.fixed) == (first.message_ids, {first.message_ids[0]: "broker-a"})


async def _lease_gone(client: aioredis.Redis, lease_key: str) -> bool:
    return not await client.exists(lease_key)


async def test_a_running_request_keeps_its_key_past_its_lease_and_a_dead_ones_key_is_free_a_lease_later() -> None:
    client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
    # Short, for the test's sake, yet longer than the stalls of a loaded machine: with 60 ms, one stall past the
    # lease (the suite at one CPU) let it run out between two renewals, and the renewing stopped, as it should.
    keys = IdempotencyKeys(client, lease_ms=400)
    key = str(uuid.uuid4())
    try:
        first = await keys.claim("send:t", key, b"payload", 1, ids(), api_key_id=None)
        claimed_at = time.monotonic()
        async with keys.kept(first):  # a put that waits for many leases (a slow replication, a stalled disk)

            async def many_leases_passed() -> bool:
                return time.monotonic() - claimed_at > 3 * keys.lease_ms / 1000 and keys.renewals >= 3

            await eventually(many_leases_passed, "the lease renewed past three of its lengths")
            with pytest.raises(IdempotencyConflict, match="still in progress"):
                await keys.claim("send:t", key, b"payload", 1, ids(), api_key_id=None)
            await first.record({first.message_ids[0]: "broker-a"})  # still its owner
        # the gateway dies here (kill -9): the renewals stop and the lease runs out
        await eventually(lambda: _lease_gone(client, first.lease_key), "the dead request's lease ran out")
        again = await keys.claim("send:t", key, b"payload", 1, ids(), api_key_id=None)
        assert (again.message_ids, again.fixed) == (first.message_ids, {first.message_ids[0]: "broker-a"})
    finally:
        await client.aclose()


class CancellationAsError(aioredis.Redis):
    """Redis whose EVAL, once `stall` is set, waits until cancelled and then raises a Redis error rather than the
    CancelledError: how a cancellation landing inside a command can come out of a Redis client."""

    stall = False
    stalled: asyncio.Event

    def eval(self, *args: Any, **kwargs: Any) -> Any:
        return self._eval(*args, **kwargs)

    async def _eval(self, *args: Any, **kwargs: Any) -> Any:
        if not self.stall:
            return await cast(Awaitable[Any], aioredis.Redis.eval(self, *args, **kwargs))
        self.stalled.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise aioredis.ConnectionError("the connection was closed mid-command") from None


async def test_a_request_leaving_its_kept_block_is_not_held_by_a_renewal_whose_cancellation_became_an_error() -> None:
    """The flush-timeout test hung for its whole 120 s there: the answer came only when the test was cancelled."""
    client = CancellationAsError.from_url("redis://127.0.0.1:6379/0")
    client.stalled = asyncio.Event()
    keys = IdempotencyKeys(client, lease_ms=60)
    try:
        first = await keys.claim("send:t", str(uuid.uuid4()), b"payload", 1, ids(), api_key_id=None)

        async def request() -> None:
            async with keys.kept(first):
                client.stall = True
                await client.stalled.wait()  # a renewal waits on Redis as the request's put is answered

        answered = asyncio.create_task(request())
        await asyncio.wait([answered], timeout=10)  # a bound on the failure only

        assert answered.done(), "leaving kept waited on the renewal"
        answered.result()
        assert not [t for t in asyncio.all_tasks() if t.get_name() == "idempotency-lease" and not t.done()]
    finally:
        client.stall = False
        await client.aclose()
