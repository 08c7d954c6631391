"""SQL92 filters: NOT flips every definite answer (Hypothesis)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from libs.filters import compile_filter

# A message on which every atom below is either true or false, never unknown,
# so NOT must flip every answer.
TAG = "TagA"
PROPERTIES = {"a": "3", "b": "-1.5", "c": "red"}
NUMBERS: dict[str, float] = {"a": 3, "b": -1.5}
OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "<>": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}

Case = tuple[str, bool]
"""An expression and whether it matches the message above."""


def _comparison(name: str, op: str, number: int) -> Case:
    return f"{name} {op} {number}", OPERATORS[op](NUMBERS[name], number)


def _between(name: str, low: int, width: int, negated: bool) -> Case:
    inside = low <= NUMBERS[name] <= low + width
    return f"{name} {'NOT ' if negated else ''}BETWEEN {low} AND {low + width}", inside != negated


def _member(colours: list[str], negated: bool) -> Case:
    listed = ", ".join(f"'{colour}'" for colour in colours)
    return f"c {'NOT ' if negated else ''}IN ({listed})", ("red" in colours) != negated


def _text(keyword: str, search: str, negated: bool) -> Case:
    found = {"CONTAINS": search in "red", "STARTSWITH": "red".startswith(search), "ENDSWITH": "red".endswith(search)}
    return f"c {'NOT ' if negated else ''}{keyword} '{search}'", found[keyword] != negated


ATOMS: st.SearchStrategy[Case] = st.one_of(
    st.builds(_comparison, st.sampled_from(sorted(NUMBERS)), st.sampled_from(sorted(OPERATORS)), st.integers(-5, 5)),
    st.builds(_between, st.sampled_from(sorted(NUMBERS)), st.integers(-5, 5), st.integers(0, 5), st.booleans()),
    st.builds(_member, st.lists(st.sampled_from(["red", "blue", "green"]), min_size=1, unique=True), st.booleans()),
    st.builds(
        _text,
        st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]),
        st.sampled_from(["r", "e", "ed", "x", "red"]),
        st.booleans(),
    ),
    st.builds(lambda tag: (f"TAGS = '{tag}'", tag == TAG), st.sampled_from([TAG, "TagB"])),
    st.builds(
        lambda name, negated: (f"{name} IS {'NOT ' if negated else ''}NULL", negated),
        st.sampled_from(["a", "c", "TAGS"]),
        st.booleans(),
    ),
)


def _combined(children: st.SearchStrategy[Case]) -> st.SearchStrategy[Case]:
    def both(left: Case, right: Case, keyword: str) -> Case:
        return f"({left[0]}) {keyword} ({right[0]})", left[1] and right[1]

    def either(left: Case, right: Case, keyword: str) -> Case:
        return f"({left[0]}) {keyword} ({right[0]})", left[1] or right[1]

    return st.one_of(
        st.builds(both, children, children, st.sampled_from(["AND", "and"])),
        st.builds(either, children, children, st.sampled_from(["OR", "or"])),
        st.builds(lambda case: (f"NOT ({case[0]})", not case[1]), children),
    )


@given(st.recursive(ATOMS, _combined, max_leaves=8))
def test_not_of_an_expression_matches_exactly_when_the_expression_does_not(case: Case) -> None:
    expression, expected = case

    assert compile_filter("SQL92", expression).matches(TAG, PROPERTIES) is expected
    assert compile_filter("SQL92", f"NOT ({expression})").matches(TAG, PROPERTIES) is not expected
