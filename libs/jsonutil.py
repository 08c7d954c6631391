"""JSON encoding shared by every service: orjson, with bytes never leaking into text."""

from __future__ import annotations

from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def loads(raw: bytes | str) -> Any:
    return orjson.loads(raw)
