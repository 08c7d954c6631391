"""Calls of the SQL92 filter for its tests: does an expression match, what error does it raise."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from libs.errors import InvalidFilter
from libs.filters import compile_filter


def matches(expression: str, properties: Mapping[str, str] | None = None, tag: str | None = None) -> bool:
    return compile_filter("SQL92", expression).matches(tag, properties or {})


def invalid(expression: str) -> InvalidFilter:
    with pytest.raises(InvalidFilter) as raised:
        compile_filter("SQL92", expression)
    return raised.value
