"""TAG filters: `TagA || TagB` or `*`, decided on the tag hash code and then on the tag."""

from __future__ import annotations

import pytest

from libs.errors import InvalidFilter
from libs.filters import ACCEPT_ALL, FilterType, compile_filter
from libs.message import tags_code


@pytest.mark.parametrize(
    ("expression", "tag", "expected"),
    [
        ("TagA", "TagA", True),
        ("TagA", "TagB", False),
        ("TagA", "taga", False),
        ("TagA || TagB || TagC", "TagB", True),
        ("TagA || TagB || TagC", "TagD", False),
        ("TagA||TagB", "TagB", True),
        ("  TagA  ||   TagB ", "TagA", True),
        ("TagA || || TagB ||", "TagB", True),
        ("TagA || TagB", "TagA || TagB", False),
        ("Tag A", "Tag A", True),
        ("*", "TagA", True),
        ("*", None, True),
        ("", "TagA", True),
        ("", None, True),
        ("   ", None, True),
        (" * ", None, True),
        ("TagA", None, False),
        ("TagA", "", False),
        ("标签 || TagB", "标签", True),
    ],
)
def test_tag_filter_matches_the_subscribed_tags(expression: str, tag: str | None, expected: bool) -> None:
    assert compile_filter(FilterType.TAG, expression).matches(tag, {}) is expected


def test_tag_filter_ignores_properties() -> None:
    assert not compile_filter("TAG", "TagA").matches(None, {"TAGS": "TagA"})


@pytest.mark.parametrize("tag", ["TagA", "TagB"])
def test_code_of_a_subscribed_tag_passes(tag: str) -> None:
    assert compile_filter("TAG", "TagA || TagB").matches_code(tags_code(tag))


@pytest.mark.parametrize("tag", ["TagC", "taga", None])
def test_code_of_another_tag_or_no_tag_fails(tag: str | None) -> None:
    assert not compile_filter("TAG", "TagA || TagB").matches_code(tags_code(tag))


@pytest.mark.parametrize("code", [0, 1, tags_code("TagA"), 2**32 - 1])
def test_star_passes_every_code(code: int) -> None:
    assert compile_filter("TAG", "*").matches_code(code)


def test_a_colliding_code_passes_but_the_tag_recheck_fails() -> None:
    tag_filter = compile_filter("TAG", "TagA")
    other_tag_with_the_same_code = "TagZ"
    code = tags_code("TagA")

    assert tag_filter.matches_code(code)
    assert not tag_filter.matches(other_tag_with_the_same_code, {})


def test_subscribe_all_is_accept_all() -> None:
    assert compile_filter("TAG", "*") is ACCEPT_ALL
    assert compile_filter("TAG", "") is ACCEPT_ALL
    assert ACCEPT_ALL.matches(None, {})
    assert ACCEPT_ALL.matches_code(0)


@pytest.mark.parametrize("expression", ["||", " || || "])
def test_expression_naming_no_tag_is_invalid(expression: str) -> None:
    with pytest.raises(InvalidFilter) as raised:
        compile_filter("TAG", expression)
    assert str(raised.value) == f"TAG expression {expression!r} names no tag"
