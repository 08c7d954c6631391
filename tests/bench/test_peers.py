"""Issue 29's peers: the FastAPI + Redis endpoint stores what it is sent, and RabbitMQ's absence is said, not hidden."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import httpx
import pytest
import redis

from bench import rabbitmq_reference, redis_benchmark
from bench.redis_endpoint import DEFAULT_REDIS, STREAM_PREFIX, delete_stream, redis_endpoint_app


async def test_the_redis_endpoint_adds_each_send_to_its_topics_stream_and_answers_201() -> None:
    topic = f"test-{uuid.uuid4().hex[:12]}"
    app = redis_endpoint_app()
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://peer") as client,
    ):
        answer = await client.post(f"/v1/topics/{topic}/messages", json={"body": "x" * 1024, "tag": "t"})
        refused = await client.post(f"/v1/topics/{topic}/messages", json={"tag": "t"})
    stored = redis.Redis.from_url(DEFAULT_REDIS)
    try:
        entries: list[tuple[bytes, dict[bytes, bytes]]] = stored.xrange(f"{STREAM_PREFIX}{topic}")  # type: ignore[assignment]
    finally:
        stored.close()
        delete_stream(topic)

    assert answer.status_code == 201
    assert [(entry_id.decode(), fields) for entry_id, fields in entries] == [
        (answer.json()["message_id"], {b"body": b"x" * 1024, b"tag": b"t"})
    ]
    assert refused.status_code == 422


def test_without_rabbitmq_the_publish_figure_is_left_out_and_the_run_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no rabbitmq-plugins

    assert rabbitmq_reference.management_api("http://127.0.0.1:1/api") is None
    assert "RabbitMQ is not installed here" in capsys.readouterr().out


def test_redis_benchmark_drives_the_batch_reference_as_pipelined_xadds_of_32() -> None:
    if shutil.which("redis-benchmark") is None:
        pytest.skip("redis-benchmark (Debian: redis-tools) is not installed: the batch reference uses redis-py")

    tally = redis_benchmark.xadds(DEFAULT_REDIS, warmup=0.0, seconds=0.01)

    assert tally is not None
    # whole rounds of 32 clients, at least one: how many the machine's rate gives in 0.01 s
    assert tally.requests >= 32, tally
    assert tally.requests % 32 == 0, tally
    assert (tally.errors, tally.messages_per_request) == (0, 32)
    assert tally.succeeded_per_second > 0
