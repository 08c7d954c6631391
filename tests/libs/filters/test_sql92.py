"""SQL92 filters: RocketMQ's selector language over a message's tag and properties."""

from __future__ import annotations

import pytest

from libs.filters import compile_filter
from tests.support.sql92 import matches

ORDER = {"a": "5", "price": "10.5", "neg": "-3", "big": "12345678901234567890", "name": "apple"}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("a = 5", True),
        ("a = 5.0", True),
        ("a = 05", True),
        ("a = 6", False),
        ("a <> 6", True),
        ("a <> 5", False),
        ("a > 4", True),
        ("a > 5", False),
        ("a >= 5", True),
        ("a >= 6", False),
        ("a < 6", True),
        ("a < 5", False),
        ("a <= 5", True),
        ("a <= 4", False),
        ("price > 10", True),
        ("price < 10.6", True),
        ("price = 10.5", True),
        ("price = 10", False),
        ("neg < 0", True),
        ("neg = -3", True),
        ("neg > -3.5", True),
        ("a > -1e3", True),
        ("a < 5e1", True),
        ("a > .5", True),
        ("a < 5.", False),
        ("big = 12345678901234567890", True),
        ("big > 12345678901234567889", True),
    ],
)
def test_number_comparisons(expression: str, expected: bool) -> None:
    assert matches(expression, ORDER) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("name = 'apple'", True),
        ("name = 'Apple'", False),
        ("name <> 'pear'", True),
        ("name <> 'apple'", False),
        ("a = '5'", True),
        ("a = '5.0'", False),
        ("price = '10.50'", False),
    ],
)
def test_string_comparisons_compare_the_text(expression: str, expected: bool) -> None:
    assert matches(expression, ORDER) is expected


@pytest.mark.parametrize(
    ("expression", "properties", "expected"),
    [
        ("flag = TRUE", {"flag": "true"}, True),
        ("flag = TRUE", {"flag": "TRUE"}, True),
        ("flag = FALSE", {"flag": "false"}, True),
        ("flag = FALSE", {"flag": "true"}, False),
        ("flag <> FALSE", {"flag": "true"}, True),
        ("flag <> TRUE", {"flag": "true"}, False),
        ("flag = FALSE", {"flag": "no"}, False),
        ("flag <> TRUE", {"flag": "no"}, False),
        ("flag", {"flag": "true"}, True),
        ("flag", {"flag": "false"}, False),
        ("NOT flag", {"flag": "false"}, True),
        ("flag", {"flag": "yes"}, False),
        ("NOT flag", {"flag": "yes"}, False),
        ("flag", {}, False),
        ("NOT flag", {}, False),
    ],
)
def test_booleans_read_true_and_false_in_any_case(expression: str, properties: dict[str, str], expected: bool) -> None:
    assert matches(expression, properties) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("name > 5", False),
        ("NOT (name > 5)", False),
        ("name = 5", False),
        ("name <> 5", False),
        ("name BETWEEN 1 AND 10", False),
        ("name NOT BETWEEN 1 AND 10", False),
        ("name = TRUE", False),
        ("name <> TRUE", False),
    ],
)
def test_a_value_that_does_not_read_as_the_literals_type_matches_nothing(expression: str, expected: bool) -> None:
    assert matches(expression, ORDER) is expected


@pytest.mark.parametrize("value", [" 5", "5 ", "1_000", "0x10", "NaN", "inf", "\u0665", ""])
def test_only_plain_numbers_read_as_numbers(value: str) -> None:
    assert not matches("a >= 0", {"a": value})
    assert not matches("a < 0", {"a": value})


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("5 = a", True),
        ("4 < a", True),
        ("6 < a", False),
        ("6 >= a", True),
        ("'apple' = name", True),
        ("a = a", True),
        ("a < price", True),
        ("price <= a", False),
        ("a = price", False),
        ("a <> price", True),
        ("name = name", True),
        ("name > a", False),
        ("x = a", False),
        ("1 = 1", True),
        ("2 < 1", False),
        ("'x' = 'x'", True),
        ("TRUE <> FALSE", True),
        ("1 = '1'", False),
        ("1 <> '1'", False),
    ],
)
def test_literals_and_properties_on_either_side(expression: str, expected: bool) -> None:
    assert matches(expression, ORDER) is expected


ONE_TWO_THREE = {"a": "1", "b": "2", "c": "3"}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("a = 1 AND b = 2", True),
        ("a = 1 AND b = 3", False),
        ("a = 2 OR b = 2", True),
        ("a = 2 OR b = 3", False),
        ("a = 1 OR b = 3 AND c = 4", True),
        ("(a = 1 OR b = 3) AND c = 4", False),
        ("a = 2 AND b = 3 OR c = 3", True),
        ("a = 2 AND (b = 3 OR c = 3)", False),
        ("NOT a = 2 AND b = 2", True),
        ("NOT a = 1 AND b = 3", False),
        ("NOT (a = 1 AND b = 3)", True),
        ("NOT a = 1 OR b = 2", True),
        ("NOT (a = 1 OR b = 2)", False),
        ("NOT NOT a = 1", True),
        ("a = 1 AND b = 2 AND c = 3", True),
        ("a = 1 AND b = 2 AND c = 4", False),
        ("a = 0 OR b = 0 OR c = 3", True),
        ("a = 0 OR b = 0 OR c = 0", False),
        ("((a = 1))", True),
        ("TRUE", True),
        ("FALSE", False),
        ("NULL", False),
        ("NOT FALSE", True),
        ("NOT NULL", False),
        ("a = 1 AND TRUE", True),
    ],
)
def test_not_binds_tighter_than_and_and_and_tighter_than_or(expression: str, expected: bool) -> None:
    assert matches(expression, ONE_TWO_THREE) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("a BETWEEN 1 AND 10", True),
        ("a BETWEEN 5 AND 5", True),
        ("a BETWEEN 6 AND 10", False),
        ("a BETWEEN -1.5 AND 5.5", True),
        ("a NOT BETWEEN 6 AND 10", True),
        ("a NOT BETWEEN 1 AND 10", False),
        ("a BETWEEN 1 AND 10 AND name = 'apple'", True),
        ("a BETWEEN low AND high", True),
        ("a BETWEEN 1 AND low", False),
        ("a NOT BETWEEN low AND high", False),
        ("a NOT BETWEEN 6 AND high", True),
        ("x BETWEEN 1 AND 10", False),
        ("x NOT BETWEEN 1 AND 10", False),
        ("a BETWEEN x AND 10", False),
    ],
)
def test_between_includes_both_bounds(expression: str, expected: bool) -> None:
    assert matches(expression, {**ORDER, "low": "1", "high": "9"}) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("name IN ('apple', 'pear')", True),
        ("name IN ('pear')", False),
        ("name NOT IN ('pear')", True),
        ("name NOT IN ('apple', 'pear')", False),
        ("a IN ('5')", True),
        ("a IN ('5.0')", False),
        ("x IN ('apple')", False),
        ("x NOT IN ('apple')", False),
        ("quote IN ('it''s')", True),
    ],
)
def test_in_lists_strings(expression: str, expected: bool) -> None:
    assert matches(expression, {**ORDER, "quote": "it's"}) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("x IS NULL", True),
        ("x IS NOT NULL", False),
        ("name IS NULL", False),
        ("name IS NOT NULL", True),
        ("empty IS NULL", False),
        ("empty = ''", True),
        ("NOT x IS NULL", False),
    ],
)
def test_is_null_tests_for_a_missing_property(expression: str, expected: bool) -> None:
    assert matches(expression, {**ORDER, "empty": ""}) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("name CONTAINS 'ppl'", True),
        ("name CONTAINS 'x'", False),
        ("name CONTAINS 'PP'", False),
        ("name NOT CONTAINS 'x'", True),
        ("name NOT CONTAINS 'pp'", False),
        ("name STARTSWITH 'ap'", True),
        ("name STARTSWITH 'pl'", False),
        ("name NOT STARTSWITH 'pl'", True),
        ("name NOT STARTSWITH 'ap'", False),
        ("name ENDSWITH 'le'", True),
        ("name ENDSWITH 'ap'", False),
        ("name NOT ENDSWITH 'ap'", True),
        ("name NOT ENDSWITH 'le'", False),
        ("name CONTAINS 'apple'", True),
        ("name CONTAINS ''", False),
        ("name NOT CONTAINS ''", False),
        ("name STARTSWITH ''", False),
        ("x CONTAINS 'a'", False),
        ("x NOT CONTAINS 'a'", False),
        ("x NOT ENDSWITH 'a'", False),
    ],
)
def test_text_tests_are_case_sensitive(expression: str, expected: bool) -> None:
    assert matches(expression, ORDER) is expected


@pytest.mark.parametrize(
    ("expression", "tag", "expected"),
    [
        ("TAGS = 'TagA'", "TagA", True),
        ("TAGS IN ('TagA', 'TagB')", "TagA", True),
        ("TAGS NOT IN ('TagA', 'TagB')", "TagC", True),
        ("TAGS <> 'TagA'", "TagA", False),
        ("TAGS STARTSWITH 'Tag'", "TagA", True),
        ("TAGS IS NOT NULL", "TagA", True),
        ("TAGS = 'TagA'", None, False),
        ("TAGS <> 'TagA'", None, False),
        ("TAGS IS NULL", None, True),
        ("TAGS = 'TagB'", "TagB", True),
        ("tags = 'lower'", None, True),
    ],
)
def test_tags_is_the_message_tag(expression: str, tag: str | None, expected: bool) -> None:
    properties = {"TAGS": "TagA", "tags": "lower"}
    assert compile_filter("SQL92", expression).matches(tag, properties) is expected


@pytest.mark.parametrize(
    "expression",
    [
        "x = 1",
        "x <> 1",
        "x > 1",
        "x = 'a'",
        "x <> 'a'",
        "x = TRUE",
        "x = y",
        "NOT (x = 1)",
        "NOT x = 1",
        "NOT x <> 1",
        "x = 1 AND a = 1",
        "NOT (x = 1 OR a = 2)",
        "NOT (x = 1 AND a = 1)",
    ],
)
def test_a_comparison_with_a_missing_property_is_unknown_and_never_matches(expression: str) -> None:
    assert not matches(expression, {"a": "1"})


@pytest.mark.parametrize(
    "expression",
    [
        "x = 1 OR a = 1",
        "NOT (x = 1 AND a = 2)",
        "NOT (x = 1 OR a = 2) OR a = 1",
        "x IS NULL AND a = 1",
    ],
)
def test_an_unknown_part_does_not_stop_the_rest_from_deciding(expression: str) -> None:
    assert matches(expression, {"a": "1"})


@pytest.mark.parametrize(
    "expression",
    [
        "a = 1 and b = 2",
        "a = 1 AnD b = 2",
        "a = 2 or b = 2",
        "not a = 2",
        "a between 0 and 3",
        "a Not Between 2 AND 3",
        "a in ('1')",
        "a nOt iN ('2')",
        "x is null",
        "a IS not NULL",
        "name contains 'pp'",
        "name startsWith 'ap'",
        "name endswith 'le'",
        "name not ENDSWITH 'x'",
        "flag = True",
        "flag <> false",
        "true",
    ],
)
def test_keywords_are_case_insensitive(expression: str) -> None:
    assert matches(expression, {"a": "1", "b": "2", "name": "apple", "flag": "true"})


@pytest.mark.parametrize(
    ("expression", "properties"),
    [
        ("A = 1", {"A": "1"}),
        ("order.id = 7", {"order.id": "7"}),
        ("_private = 1", {"_private": "1"}),
        (
            "index = 1 AND order = 2 AND notes = 'x' AND isbn = 3",
            {"index": "1", "order": "2", "notes": "x", "isbn": "3"},
        ),
        (
            "nullable = 'y' AND android = 'z' AND trueish = 't' AND between_ = 'b'",
            {"nullable": "y", "android": "z", "trueish": "t", "between_": "b"},
        ),
    ],
)
def test_property_names_are_case_sensitive_and_may_start_with_a_keyword(
    expression: str, properties: dict[str, str]
) -> None:
    assert matches(expression, properties)
    assert not matches(expression, {name.swapcase(): value for name, value in properties.items()})


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("q = 'it''s'", "it's"),
        ("q = ''''", "'"),
        ("q = ''", ""),
        ("q = 'a  b'", "a  b"),
        ("q = 'AND'", "AND"),
        ("q = '价格'", "价格"),
        ("q = 'a -- b'", "a -- b"),
        ("q IN ('x', 'it''s', 'y')", "it's"),
        ("q CONTAINS ''''", "it's"),
    ],
)
def test_strings_are_single_quoted_with_a_doubled_quote_inside(expression: str, value: str) -> None:
    assert matches(expression, {"q": value})


@pytest.mark.parametrize(
    "expression",
    [
        "a = 1 -- and a trailing comment",
        "/* a leading comment */ a = 1",
        "a = /* inside */ 1",
        "a\n=\n1",
        "\ta = 1\r\n",
        "a=1",
        "(a=1)AND(a<>2)",
    ],
)
def test_whitespace_and_comments_are_ignored(expression: str) -> None:
    assert matches(expression, {"a": "1"})
