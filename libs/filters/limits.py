"""FilterLimits: how large a filter expression may be, so that none costs much to compile or to evaluate.

A broker asks its subscriptions' filters about every message it scans, so an expression's
size is a cost paid per message, not once: the limits bound it. The length is checked
before anything reads the expression; the rest before the parser builds a tree (a pass
of the lexer counts them), except how deep AND, OR and NOT nest, which the tree shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

MAX_EXPRESSION_LENGTH: Final = 4096
"""The longest expression the public API takes (its schemas say so); a service may set a lower limit."""


@dataclass(frozen=True, slots=True)
class FilterLimits:
    max_length: int = MAX_EXPRESSION_LENGTH
    """Characters of an expression, TAG or SQL92."""
    max_nesting: int = 100
    """How deep parentheses may nest, and AND, OR and NOT (evaluation recurses once per level)."""
    max_conditions: int = 256
    """Conditions an SQL92 expression joins with AND and OR: a message costs one evaluation of each."""
    max_in_list: int = 256
    """Strings in one SQL92 IN list."""


DEFAULT_LIMITS: Final = FilterLimits()
