"""A peer a user could pick instead of Petrel: FastAPI + Redis Streams, what a team writes in an afternoon.

`POST /v1/topics/{topic}/messages` takes the JSON a Petrel single send takes
(`body`, `tag`), validates it with pydantic, XADDs it to the stream
`petrel-bench-endpoint:{topic}` of the Redis at `BENCH_REDIS_URL` (the shared
one by default), and answers 201 with the entry's id once Redis has it, as a
send is answered once the broker has it. It is served as such a team would serve
it: `uvicorn --factory bench.redis_endpoint:redis_endpoint_app` with uvloop and
httptools, one process (bench.loopback.served_process). The scenario deletes the
stream afterwards (`delete_stream`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from pydantic import BaseModel

REDIS_URL_ENV = "BENCH_REDIS_URL"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
STREAM_PREFIX = "petrel-bench-endpoint:"


class Message(BaseModel):
    body: str
    tag: str = ""


class Sent(BaseModel):
    message_id: str


def redis_endpoint_app() -> FastAPI:
    import redis.asyncio as redis

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.redis = redis.Redis.from_url(os.environ.get(REDIS_URL_ENV, DEFAULT_REDIS))
        yield
        await app.state.redis.aclose()

    app = FastAPI(lifespan=lifespan)

    @app.post("/v1/topics/{topic}/messages", status_code=201)
    async def send(topic: str, message: Message, request: Request) -> Sent:
        entry_id = await request.app.state.redis.xadd(f"{STREAM_PREFIX}{topic}", message.model_dump())
        return Sent(message_id=entry_id.decode())

    return app


def delete_stream(topic: str, url: str = DEFAULT_REDIS) -> None:
    """Delete what the endpoint wrote to `topic`'s stream."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.delete(f"{STREAM_PREFIX}{topic}")
    finally:
        client.close()
