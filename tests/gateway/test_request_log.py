"""The gateway's request log: one JSON line per request when PETREL_GATEWAY_REQUEST_LOG is on, never a key or body."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from libs.http.request_log import LOGGER_NAME
from tests.support.api_keys import bearer, issue_key

pytestmark = pytest.mark.asyncio

BODY = "order 7 paid, card 4111"


@pytest.fixture
def key(tmp_path: Path) -> str:
    return issue_key(tmp_path, "admin", "pub", "sub", name="logger")


@pytest.fixture
def gateway_overrides(tmp_path: Path, key: str) -> dict[str, Any]:
    return {"auth": "required", "data_dir": tmp_path, "request_log": True}


def lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(record.getMessage()) for record in caplog.records if record.name == LOGGER_NAME]


async def test_each_request_is_one_line_with_its_key_id_and_never_the_key_or_body(
    gateway: httpx.AsyncClient, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    sent = await gateway.post(
        "/v1/topics/orders/messages?trace=1", json={"body": BODY}, headers=bearer(key) | {"x-request-id": "req-42"}
    )
    assert sent.status_code == 201
    assert sent.headers["x-request-id"] == "req-42", "the answer carries the request id back"
    refused = await gateway.get("/v1/topics")
    assert refused.status_code == 401

    send_line, refused_line = lines(caplog)
    assert send_line["method"] == "POST"
    assert send_line["path"] == "/v1/topics/orders/messages"
    assert (send_line["status"], send_line["request_id"]) == (201, "req-42")
    assert send_line["key_id"] == key.split("_", 2)[1]
    assert send_line["duration_ms"] >= 0
    assert send_line["time"].endswith("Z")
    assert (refused_line["status"], "key_id" in refused_line) == (401, False)
    assert refused_line["request_id"] == refused.headers["x-request-id"]
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert key not in logged
    assert key.split("_", 2)[2] not in logged, "the secret part of the key"
    assert "4111" not in logged
    assert "trace=1" not in logged


async def test_a_request_id_that_is_not_a_plain_token_is_replaced(
    gateway: httpx.AsyncClient, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    answer = await gateway.get("/v1/topics", headers=bearer(key) | {"x-request-id": "a b\tc" + "x" * 80})
    assert answer.status_code == 200
    (line,) = lines(caplog)
    assert line["request_id"] == answer.headers["x-request-id"]
    assert len(line["request_id"]) == 32
