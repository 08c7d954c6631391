"""A request log line is written alone, one JSON document a line, without the service log's prefix."""

from __future__ import annotations

import json
import logging

import pytest

from libs.http.request_log import plain_lines


def test_the_lines_are_bare_json_on_standard_error(capsys: pytest.CaptureFixture[str]) -> None:
    name = "petrel.requests.test-plain-lines"
    logger = logging.getLogger(name)
    try:
        plain_lines(name)
        plain_lines(name)  # twice: still one handler, one line per request
        logger.info(json.dumps({"method": "GET", "status": 200}))
        assert capsys.readouterr().err.splitlines() == ['{"method": "GET", "status": 200}']
    finally:
        logger.handlers.clear()
