"""Grants and policies: what `--allow` and `--deny` mean."""

from __future__ import annotations

import pytest

from libs.auth.grants import Action, Grant, Policy
from libs.errors import InvalidRequest

PUB, SUB, ADMIN = Action.PUBLISH, Action.SUBSCRIBE, Action.ADMIN


@pytest.mark.parametrize(
    ("text", "action", "kind", "name", "covered"),
    [
        ("pub:orders*", PUB, "topic", "orders-eu", True),
        ("pub:orders*", PUB, "group", "orders-eu", True),  # no kind: topics and groups alike
        ("pub:orders*", SUB, "topic", "orders-eu", False),
        ("pub:orders*", PUB, "topic", "my-orders", False),
        ("sub:group/billing", SUB, "group", "billing", True),
        ("sub:group/billing", SUB, "topic", "billing", False),
        ("sub:topic/b?lling", SUB, "topic", "bolling", True),
        ("admin", ADMIN, "cluster", "*", True),
        ("admin:orders*", ADMIN, "cluster", "*", False),
        ("admin:*", ADMIN, "topic", "anything", True),
        ("publish:x", PUB, "topic", "x", True),
    ],
)
def test_a_grant_covers_the_names_its_pattern_matches(
    text: str, action: Action, kind: str, name: str, covered: bool
) -> None:
    assert Grant.parse(text).covers(action, kind, name) is covered  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["read:orders", "pub:", "pub:a b", "pub:" + "x" * 300, ""])
def test_a_malformed_grant_is_refused_saying_why(text: str) -> None:
    with pytest.raises(InvalidRequest, match="grant"):
        Grant.parse(text)


def test_deny_beats_allow_and_admin_is_not_publish() -> None:
    policy = Policy.parse(["pub", "admin"], ["pub:secret*"])
    assert policy.permits(PUB, "topic", "orders")
    assert not policy.permits(PUB, "topic", "secret-plans")
    assert not policy.permits(SUB, "topic", "orders")
    assert policy.may_ever(PUB)
    assert not policy.may_ever(SUB)
    assert not policy.covers_all(PUB, "topic")  # a deny narrows "every topic"
    assert Policy.parse(["pub:topic/*"]).covers_all(PUB, "topic")
    assert str(Grant.parse("sub:group/billing")) == "sub:group/billing"
    assert str(Grant.parse("admin:*")) == "admin"
