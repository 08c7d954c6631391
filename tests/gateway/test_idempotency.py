"""IdempotencyKeys against the real Redis on 127.0.0.1:6379."""

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.idempotency import IdempotencyKeys
from libs.errors import IdempotencyConflict, ServiceUnavailable, ValidationFailed


@pytest.fixture
async def keys() -> AsyncIterator[IdempotencyKeys]:
    client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
    yield IdempotencyKeys(client)
    await client.aclose()


async def test_a_repeat_while_the_first_is_in_flight_is_409(keys: IdempotencyKeys) -> None:
    key = str(uuid.uuid4())
    await keys.claim("send:t", key, b"payload")
    with pytest.raises(IdempotencyConflict, match="still in progress"):
        await keys.claim("send:t", key, b"payload")


async def test_a_finished_request_is_replayed_and_a_different_body_refused(keys: IdempotencyKeys) -> None:
    key = str(uuid.uuid4())
    claim = await keys.claim("send:t", key, b"payload")
    await keys.complete(claim, {"message_id": "M1"})

    again = await keys.claim("send:t", key, b"payload")
    assert again.replay == {"message_id": "M1"}
    with pytest.raises(ValidationFailed, match="different request body"):
        await keys.claim("send:t", key, b"other payload")


async def test_a_failed_request_releases_its_key(keys: IdempotencyKeys) -> None:
    key = str(uuid.uuid4())
    await keys.release(await keys.claim("send:t", key, b"payload"))
    assert (await keys.claim("send:t", key, b"payload")).replay is None


async def test_keys_are_scoped_per_topic(keys: IdempotencyKeys) -> None:
    key = str(uuid.uuid4())
    await keys.claim("send:a", key, b"payload")
    assert (await keys.claim("send:b", key, b"payload")).replay is None


async def test_redis_down_is_503_not_a_silent_send() -> None:
    client = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    try:
        with pytest.raises(ServiceUnavailable, match="idempotency key store"):
            await IdempotencyKeys(client).claim("send:t", "k", b"payload")
    finally:
        await client.aclose()
