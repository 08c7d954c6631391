"""Filter expressions are bounded (length, parentheses, conditions, IN lists) and compiled once per process."""

from __future__ import annotations

import pytest

from libs.errors import InvalidFilter
from libs.filters import COMPILED_KEPT, FilterLimits, compile_filter
from tests.support.sql92 import invalid, matches

IN_257 = "a IN (" + ", ".join(f"'{n}'" for n in range(257)) + ")"


@pytest.mark.parametrize(
    ("expression", "position", "reason"),
    [
        ("(" * 101 + "a = 1" + ")" * 101, 101, "parentheses nest more than 100 deep"),
        ("NOT (" * 101 + "a = 1" + ")" * 101, 505, "parentheses nest more than 100 deep"),
        (" OR ".join(["a = 1"] * 257), 256 * 9 + 1 - 3, "more than 256 conditions"),
        (IN_257, len(IN_257) - 5, "an IN list holds more than 256 strings"),
    ],
)
def test_expression_past_a_limit_is_refused_naming_it(expression: str, position: int, reason: str) -> None:
    error = invalid(expression)

    assert str(error) == f"SQL92 expression {expression!r} is invalid at position {position}: {reason}"
    assert error.extensions == {"position": position}


def test_limits_are_checked_before_the_expression_is_parsed() -> None:
    unclosed = "(" * 5000  # would be "unexpected end of expression" if lark parsed it, and 5000 > 4096
    assert "more than 4096" in str(invalid(unclosed))
    assert str(invalid("(" * 101 + "a = ")).endswith("parentheses nest more than 100 deep")
    assert str(invalid(" AND ".join(["a ="] * 300))).endswith("more than 256 conditions")


def test_the_and_of_between_is_not_a_condition() -> None:
    three = FilterLimits(max_conditions=3)
    expression = " AND ".join(["a BETWEEN 1 AND 2"] * 3)

    assert compile_filter("SQL92", expression, three).matches(None, {"a": "1"})
    with pytest.raises(InvalidFilter, match="more than 3 conditions"):
        compile_filter("SQL92", expression + " AND b = 1", three)


def test_an_in_list_of_the_limit_and_parentheses_around_it_compile() -> None:
    listed = "a IN (" + ", ".join(f"'{n}'" for n in range(256)) + ")"
    assert matches("(" * 99 + listed + ")" * 99, {"a": "7"})


def test_a_service_sets_its_own_limits() -> None:
    strict = FilterLimits(max_length=20, max_nesting=2, max_conditions=2, max_in_list=2)

    with pytest.raises(InvalidFilter, match="is 21 characters long, more than 20"):
        compile_filter("TAG", "a" * 21, strict)
    with pytest.raises(InvalidFilter, match="more than 2 conditions"):
        compile_filter("SQL92", "a=1 OR b=1 OR c=1", strict)
    with pytest.raises(InvalidFilter, match="parentheses nest more than 2 deep"):
        compile_filter("SQL92", "(((a=1)))", strict)
    with pytest.raises(InvalidFilter, match="an IN list holds more than 2 strings"):
        compile_filter("SQL92", "a IN ('x','y','z')", strict)
    with pytest.raises(InvalidFilter, match="conditions nest more than 2 deep"):
        compile_filter("SQL92", "NOT NOT a = 1", strict)


def test_an_expression_compiled_under_wider_limits_is_still_refused_under_narrower_ones() -> None:
    expression = "limits_a = 1 OR limits_b = 1"
    assert compile_filter("SQL92", expression).matches(None, {"limits_a": "1"})

    with pytest.raises(InvalidFilter, match="more than 1 conditions"):
        compile_filter("SQL92", expression, FilterLimits(max_conditions=1))


def test_an_expression_in_use_stays_compiled_while_many_others_come_and_go() -> None:
    kept = compile_filter("SQL92", "kept_a > 5")
    for n in range(2 * COMPILED_KEPT):
        compile_filter("TAG", f"passing-{n}")
        assert compile_filter("SQL92", "kept_a > 5") is kept, f"recompiled after {n} other expressions"


def test_the_compiled_filters_kept_are_bounded() -> None:
    first = compile_filter("SQL92", "evicted_a > 5")
    for n in range(COMPILED_KEPT):
        compile_filter("TAG", f"crowding-{n}")

    again = compile_filter("SQL92", "evicted_a > 5")
    assert again is not first, f"{COMPILED_KEPT} other expressions compiled, the first still kept"
    assert again == first
