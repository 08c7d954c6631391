"""SQL92 filters: a bad expression is refused with its position and reason."""

from __future__ import annotations

import pytest

from tests.support.sql92 import invalid, matches


@pytest.mark.parametrize(
    ("expression", "position", "reason"),
    [
        ("a > ", 4, "unexpected end of expression"),
        ("", 1, "unexpected end of expression"),
        ("   ", 1, "unexpected end of expression"),
        ("a = 1 AND", 10, "unexpected end of expression"),
        ("(a = 1", 7, "unexpected end of expression"),
        ("a > 5 FOO", 7, "unexpected 'FOO'"),
        ("a = 1)", 6, "unexpected ')'"),
        ("a == 1", 4, "unexpected '='"),
        ("AND a = 1", 1, "unexpected 'AND'"),
        ("a IN (1, 2)", 7, "unexpected '1'"),
        ("a IN ()", 7, "unexpected ')'"),
        ("'x' IN ('x')", 5, "unexpected 'IN'"),
        ("a CONTAINS b", 12, "unexpected 'b'"),
        ("a = 1\nFOO", 7, "unexpected 'FOO'"),
        ("a = 'abc", 5, "string is not closed"),
        ("a = 1 # 2", 7, "unexpected '#'"),
        ('a = "x"', 5, "unexpected '\"'"),
        ("a > 'x'", 5, "'>' compares numbers only, not 'x'"),
        ("a <= TRUE", 6, "'<=' compares numbers only, not TRUE"),
        ("NULL < a", 1, "'<' compares numbers only, not NULL"),
        ("a = NULL", 5, "'=' cannot compare with NULL: use IS NULL or IS NOT NULL"),
        ("null <> a", 1, "'<>' cannot compare with NULL: use IS NULL or IS NOT NULL"),
        ("a BETWEEN 'x' AND 5", 11, "BETWEEN compares numbers only, not 'x'"),
        ("a BETWEEN 1 AND NULL", 17, "BETWEEN compares numbers only, not NULL"),
        ("a BETWEEN b AND 'z'", 17, "BETWEEN compares numbers only, not 'z'"),
        ("a BETWEEN 5 AND 1", 11, "BETWEEN 5 AND 1 is empty"),
        ("5", 1, "5 is not a condition"),
        ("a = 1 AND 'x'", 11, "'x' is not a condition"),
        ("NOT " * 100 + "a", 397, "conditions nest more than 100 deep"),
    ],
)
def test_invalid_expression_names_the_position_and_the_reason(expression: str, position: int, reason: str) -> None:
    error = invalid(expression)

    assert str(error) == f"SQL92 expression {expression!r} is invalid at position {position}: {reason}"
    assert error.extensions == {"position": position}


def test_nesting_up_to_the_limit_compiles() -> None:
    assert matches("NOT " * 98 + "a = 1", {"a": "1"})
    assert matches("(" * 100 + "a = 1" + ")" * 100, {"a": "1"})
    assert matches(" AND ".join(["a = 1"] * 256), {"a": "1"})
    assert matches("a IN (" + ", ".join(f"'{n}'" for n in range(256)) + ")", {"a": "255"})
