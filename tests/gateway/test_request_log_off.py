"""The request log is off by default: a gateway with default settings writes no request line."""

from __future__ import annotations

import logging

import httpx
import pytest

from gateway.settings import GatewaySettings
from libs.http.request_log import LOGGER_NAME

pytestmark = pytest.mark.asyncio


async def test_no_line_and_no_request_id_header_by_default(
    gateway: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    assert GatewaySettings().request_log is False
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    answer = await gateway.get("/v1/topics")
    assert answer.status_code == 200
    assert "x-request-id" not in answer.headers
    assert [r for r in caplog.records if r.name == LOGGER_NAME] == []
