"""Delegation: a key is never wider than its maker, checked against the glob matcher that enforces grants."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libs.auth.delegation import delegate
from libs.auth.grants import Action, Grant, Policy, pattern_within
from libs.errors import Forbidden
from tests.support.examples import examples

ACTIONS = [action.value for action in Action]
# patterns of few letters, so that they often meet, made of pieces so that character
# classes (closed, negated, left open) are frequent; names hold glob characters too
PIECES = ["a", "b", "*", "?", "[", "]", "!", "[a]", "[!a]"]
NAME_CHARACTERS = "ab*?[]!-"

patterns = st.lists(st.sampled_from(PIECES), min_size=1, max_size=4).map("".join)
grants = st.builds(
    lambda action, kind, pattern: f"{action}:{kind}{pattern}" if pattern != "*" or kind else action,
    st.sampled_from(ACTIONS),
    st.sampled_from(["", "topic/", "group/"]),
    patterns | st.just("*"),
)
names = st.text(NAME_CHARACTERS, max_size=8)


def names_for(grant: str) -> st.SearchStrategy[str]:
    """Names the grant's pattern matches, drawn from the regex the glob matcher itself compiles."""
    pattern = grant.partition(":")[2].rpartition("/")[2] or "*"
    return st.from_regex(fnmatch.translate(pattern), fullmatch=True, alphabet=NAME_CHARACTERS)


@st.composite
def narrowed(draw: st.DrawFn, grant: str) -> str:
    """A grant like `grant` with its pattern cut short and drawn text added: often within it, sometimes not."""
    action, _, where = grant.partition(":")
    kind, slash, pattern = where.rpartition("/") if where else ("", "", "*")
    cut = draw(st.integers(0, len(pattern)))
    return f"{action}:{kind}{slash}{pattern[:cut]}{draw(patterns)}"


@settings(max_examples=examples(500), deadline=None)
@given(
    maker_allow=st.lists(grants, min_size=1, max_size=3),
    maker_deny=st.lists(grants, max_size=2),
    asked_deny=st.lists(grants, max_size=1),
    data=st.data(),
)
def test_whatever_a_made_key_permits_its_maker_permits(
    maker_allow: list[str], maker_deny: list[str], asked_deny: list[str], data: st.DataObject
) -> None:
    maker = Policy.parse(maker_allow, maker_deny)
    asked = [data.draw(grants | narrowed(data.draw(st.sampled_from(maker_allow)))) for _ in range(2)]
    try:
        made = delegate(maker, None, 0, "'maker'", asked, asked_deny, None)
    except Forbidden:
        return
    key = Policy.parse(made.allow, made.deny)
    tried = [data.draw(names) for _ in range(4)] + [data.draw(names_for(g)) for g in asked]
    for action in Action:
        assert not key.permits(action, "cluster") or maker.permits(action, "cluster"), (action, made)
        for kind in ("topic", "group"):
            for name in tried:
                if key.permits(action, kind, name):
                    assert maker.permits(action, kind, name), (action, kind, name, made)


@settings(max_examples=examples(1000), deadline=None)
@given(prefix=patterns | st.just(""), suffix=patterns, other=patterns, data=st.data())
def test_a_pattern_within_another_matches_no_name_the_other_does_not(
    prefix: str, suffix: str, other: str, data: st.DataObject
) -> None:
    outer = data.draw(st.sampled_from([prefix + "*", other]))
    inner = data.draw(st.sampled_from([prefix + suffix, other, prefix or other]))
    if not pattern_within(inner, outer):
        return
    inner_grant, outer_grant = Grant.parse(f"pub:{inner}"), Grant.parse(f"pub:{outer}")
    for name in [data.draw(names) for _ in range(4)] + [data.draw(names_for(f"pub:{inner}"))]:
        if inner_grant.covers(Action.PUBLISH, "topic", name):
            assert outer_grant.covers(Action.PUBLISH, "topic", name), (inner, outer, name)


@pytest.mark.parametrize(
    ("inner", "outer", "within"),
    [
        ("orders-eu*", "orders*", True),
        ("orders-eu", "orders*", True),
        ("orders?", "orders*", True),
        ("orders", "orders*", True),
        ("anything[x]", "*", True),
        ("b?lling", "b?lling", True),
        ("ord*", "orders*", False),
        ("orders-eu", "orders-e?", False),  # it holds, but only a literal prefix and `*` is decided
        ("orders[a]", "orders[*", False),
        ("xorders", "orders*", False),
    ],
)
def test_within_is_the_same_pattern_or_a_literal_prefix_and_a_star(inner: str, outer: str, within: bool) -> None:
    assert pattern_within(inner, outer) is within


def test_the_kinds_of_a_grant_without_one_may_be_covered_by_two_grants() -> None:
    maker = Policy.parse(["pub:topic/orders*", "pub:group/orders*", "admin:topic/*", "admin:group/*"])
    assert delegate(maker, None, 0, "'m'", ["pub:orders-eu"], [], None).allow == ["pub:orders-eu"]
    assert delegate(maker, None, 0, "'m'", ["admin:x*"], [], None).allow == ["admin:x*"]
    # every topic and every group, but not what spans the cluster (keys, timer stats): that needs `admin` itself
    with pytest.raises(Forbidden, match=r"the grant admin is wider .* covers the whole cluster"):
        delegate(maker, None, 0, "'m'", ["admin"], [], None)


@pytest.mark.parametrize(
    ("maker_rate", "default", "asked", "given_rate"),
    [
        (None, 0, None, None),  # the gateway's default is unlimited: anything
        (None, 0, 7, 7),
        (None, 100, None, None),  # the same default as the maker's
        (None, 100, 100, 100),
        (10, 100, None, 10),  # the maker's own
        (10, 100, 10, 10),
        (0, 100, 0, 0),  # an unlimited maker gives any rate
        (0, 100, None, None),
    ],
)
def test_a_made_key_gets_at_most_its_makers_rate(
    maker_rate: float | None, default: float, asked: float | None, given_rate: float | None
) -> None:
    made = delegate(Policy.parse(["admin"]), maker_rate, default, "'m'", ["admin"], [], asked)
    assert made.rate_per_second == given_rate


@pytest.mark.parametrize(
    ("maker_rate", "default", "asked"), [(10, 100, 11), (10, 100, 0), (None, 100, 101), (None, 5, 0)]
)
def test_a_rate_above_the_makers_is_refused(maker_rate: float | None, default: float, asked: float) -> None:
    with pytest.raises(Forbidden, match="at most its own"):
        delegate(Policy.parse(["admin"]), maker_rate, default, "'m'", ["admin"], [], asked)
