"""compile_filter: choosing the filter type, limits, caching and the problem it raises."""

from __future__ import annotations

import orjson
import pytest

from libs.errors import InvalidFilter, InvalidRequest, PetrelError
from libs.filters import MAX_EXPRESSION_LENGTH, FilterType, compile_filter
from libs.filters.sql92 import Sql92Filter
from libs.filters.tag import TagFilter
from libs.problem import error_response


@pytest.mark.parametrize(
    ("kind", "filter_class"),
    [
        (FilterType.TAG, TagFilter),
        (FilterType.SQL92, Sql92Filter),
        ("TAG", TagFilter),
        ("SQL92", Sql92Filter),
        ("tag", TagFilter),
        ("sql92", Sql92Filter),
    ],
)
def test_filter_type_picks_the_language(kind: str, filter_class: type) -> None:
    assert isinstance(compile_filter(kind, "TagA"), filter_class)


@pytest.mark.parametrize("kind", ["SQL", "REGEX", "", "TAG "])
def test_unknown_filter_type_is_invalid(kind: str) -> None:
    with pytest.raises(InvalidFilter) as raised:
        compile_filter(kind, "a = 1")
    assert str(raised.value) == f"filter type {kind!r} is not TAG or SQL92"


@pytest.mark.parametrize("kind", list(FilterType))
def test_expression_longer_than_the_limit_is_invalid(kind: FilterType) -> None:
    expression = "a = 1 OR " * 454 + "a = 1234567"
    assert len(expression) == MAX_EXPRESSION_LENGTH + 1

    with pytest.raises(InvalidFilter) as raised:
        compile_filter(kind, expression)
    assert str(raised.value) == f"{kind} expression is 4097 characters long, more than 4096"


def test_expression_at_the_limit_compiles() -> None:
    expression = "a = '" + "x" * 4090 + "'"
    assert len(expression) == MAX_EXPRESSION_LENGTH

    assert compile_filter("SQL92", expression).matches(None, {"a": "x" * 4090})


@pytest.mark.parametrize(("kind", "expression"), [("TAG", "TagA || TagB"), ("SQL92", "a > 5")])
def test_same_expression_compiles_to_the_same_filter(kind: str, expression: str) -> None:
    assert compile_filter(kind, expression) is compile_filter(kind, expression)
    assert compile_filter(kind, expression) is compile_filter(FilterType(kind), expression)


def test_same_text_as_tag_and_as_sql92_are_different_filters() -> None:
    assert compile_filter("TAG", "a") is not compile_filter("SQL92", "a")


def test_sql92_filter_passes_every_tag_code() -> None:
    sql_filter = compile_filter("SQL92", "TAGS = 'TagA'")

    assert sql_filter.matches_code(0)
    assert sql_filter.matches_code(12345)


def test_filters_show_their_expression() -> None:
    assert compile_filter("SQL92", "a > 5").expression == "a > 5"
    assert repr(compile_filter("SQL92", "a > 5")) == "Sql92Filter(expression='a > 5')"
    assert compile_filter("TAG", "TagA || TagB").expression == "TagA || TagB"


def test_invalid_filter_is_a_400_problem_with_the_position() -> None:
    with pytest.raises(InvalidFilter) as raised:
        compile_filter("SQL92", "a > ")

    assert isinstance(raised.value, InvalidRequest)
    assert orjson.loads(bytes(error_response(raised.value).body)) == {
        "type": "https://petrel.dev/problems/invalid-filter",
        "title": "Invalid filter expression",
        "status": 400,
        "detail": "SQL92 expression 'a > ' is invalid at position 4: unexpected end of expression",
        "position": 4,
    }


def test_invalid_filter_crosses_a_service_boundary_unchanged() -> None:
    problem_type = InvalidFilter.problem_type()
    rebuilt = PetrelError.from_problem_type(problem_type)

    assert rebuilt is InvalidFilter
    again = rebuilt.rebuild("SQL92 expression 'a' is invalid", {"position": 1})
    assert isinstance(again, InvalidFilter)
    assert again.extensions == {"position": 1}
