"""Delegation: a key made with another key (`POST /v1/keys`) is never wider than the key that makes it.

Three rules, checked before anything is written:

- each allow grant of the new key lies within the maker's allow grants: on each kind of
  resource it reaches (topics, groups, and the whole cluster for an unrestricted grant),
  one maker allow of the same action covers every name it matches (`Grant.within`: the
  same pattern, or the maker's a literal prefix and `*`; what cannot be decided is refused);
- the maker's deny grants are added to the new key's: what the maker may not do, the new
  key may not either, since a deny beats any allow;
- a maker with a rate gives at most that rate: a key asking none gets the maker's (or,
  when the maker has the gateway's default, that default too), one asking more or 0
  (unlimited) is refused.

So for every action and resource the new key permits only what its maker permits
(tests/libs/test_delegation.py checks it against the glob matcher itself). A refusal is
Forbidden (403) naming the grant that is wider and the maker's allow grants of its action.
A key made with `petrel keys create` has no maker: who holds the database is the root of trust.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from libs.auth.grants import KINDS, Grant, Policy, ResourceKind
from libs.errors import Forbidden


@dataclass(frozen=True, slots=True)
class Delegated:
    """The grants and rate a new key is made with."""

    allow: list[str]
    deny: list[str]
    rate_per_second: float | None


def delegate(
    maker: Policy,
    maker_rate: float | None,
    default_rate: float,
    who: str,
    allow: Sequence[str],
    deny: Sequence[str],
    rate: float | None,
) -> Delegated:
    """What a key asking `allow`, `deny` and `rate` is made with by the key `who` (Forbidden if wider).

    `maker_rate`: the maker's own (None: `default_rate`, the gateway's; 0: unlimited).
    """
    asked = Policy.parse(allow, deny)
    for grant in asked.allow:
        _require_within(grant, maker, who)
    denies = [str(g) for g in asked.deny] + [str(g) for g in maker.deny]
    return Delegated(
        [str(g) for g in asked.allow], list(dict.fromkeys(denies)), _rate(maker_rate, default_rate, rate, who)
    )


def reach(grant: Grant) -> tuple[ResourceKind, ...]:
    """The kinds of resource a grant covers some of: topics and groups, and the cluster when unrestricted."""
    kinds: tuple[ResourceKind, ...] = KINDS if grant.kind is None else (grant.kind,)
    return ("cluster", *kinds) if grant.unrestricted else kinds


def _require_within(grant: Grant, maker: Policy, who: str) -> None:
    for kind in reach(grant):
        if any(grant.within(outer, kind) for outer in maker.allow):
            continue
        same_action = [str(g) for g in maker.allow if g.action is grant.action]
        what = "the whole cluster" if kind == "cluster" else f"every {kind} it names"
        why = (
            f"none of its {grant.action.value} grants ({', '.join(same_action)}) covers {what}"
            if same_action
            else f"it holds no {grant.action.value} grant"
        )
        raise Forbidden(
            f"the grant {grant} is wider than key {who} may give: {why}",
            grant=str(grant),
            maker_allow=same_action,
        )


def _rate(maker_rate: float | None, default_rate: float, asked: float | None, who: str) -> float | None:
    ceiling = default_rate if maker_rate is None else maker_rate
    if ceiling <= 0 or (asked is not None and 0 < asked <= ceiling):
        return asked
    if asked is None:
        return maker_rate  # the maker's own, or the same default as the maker's
    shown = "0 (unlimited)" if asked == 0 else f"{asked:g}"
    raise Forbidden(
        f"the rate {shown} is wider than key {who} may give: at most its own {ceiling:g} calls a second",
        rate_per_second=ceiling,
    )
