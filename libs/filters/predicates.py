"""The small closures a compiled SQL92 filter is made of, and the value rules they apply.

Every predicate takes `(tag, properties)` and answers in three-valued logic:
True, False, or None for unknown: a NULL (a missing property) took part, or a
property did not read as the type it was compared with (`'abc' > 5`). Only
True matches, so `NOT (a > 5)` does not match a message without `a`, as in
RocketMQ. Property values arrive as strings; they are read as numbers or
booleans only when compared with a number or a boolean.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from libs.message import Prop

Predicate = Callable[[str | None, Mapping[str, str]], bool | None]
Getter = Callable[[str | None, Mapping[str, str]], str | None]
Value = int | float | str | bool | None
"""A literal's value; NULL is None."""

EQUALITY: Final[dict[str, Callable[[Any, Any], bool]]] = {"=": operator.eq, "<>": operator.ne}
ORDERING: Final[dict[str, Callable[[Any, Any], bool]]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
OPERATORS: Final = EQUALITY | ORDERING
MIRRORED: Final = {"=": "=", "<>": "<>", ">": "<", ">=": "<=", "<": ">", "<=": ">="}
"""The operator that gives the same answer with its operands swapped."""

TEXT_TESTS: Final[dict[str, Callable[[str, str], bool]]] = {
    "CONTAINS": str.__contains__,
    "STARTSWITH": str.startswith,
    "ENDSWITH": str.endswith,
}

_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_BOOLEANS: Final = {"true": True, "false": False}


def as_number(text: str) -> int | float | None:
    """The number a property value spells (`42`, `-1.5e3`), or None if it is not one."""
    if text.isascii() and text.isdigit():
        return int(text)
    if _INTEGER.fullmatch(text):
        return int(text)
    if _DECIMAL.fullmatch(text):
        return float(text)
    return None


def as_boolean(text: str) -> bool | None:
    """`true` or `false` in any case, or None."""
    return _BOOLEANS.get(text.lower())


def is_number(value: Value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def kind_of(value: Value) -> str:
    return "boolean" if isinstance(value, bool) else "number" if is_number(value) else "string"


def getter(name: str) -> Getter:
    """Reads a property; `TAGS` is the message's tag."""
    if name == Prop.TAGS:

        def tag_of(tag: str | None, properties: Mapping[str, str]) -> str | None:
            return tag

        return tag_of

    def property_of(tag: str | None, properties: Mapping[str, str]) -> str | None:
        return properties.get(name)

    return property_of


def constant(answer: bool | None) -> Predicate:
    def always(tag: str | None, properties: Mapping[str, str]) -> bool | None:
        return answer

    return always


def negation(inner: Predicate) -> Predicate:
    def negated(tag: str | None, properties: Mapping[str, str]) -> bool | None:
        answer = inner(tag, properties)
        return None if answer is None else not answer

    return negated


def all_of(parts: Sequence[Predicate]) -> Predicate:
    """AND: False if any part is False, else unknown if any part is unknown."""
    return _decided_by(parts, False)


def any_of(parts: Sequence[Predicate]) -> Predicate:
    """OR: True if any part is True, else unknown if any part is unknown."""
    return _decided_by(parts, True)


def _decided_by(parts: Sequence[Predicate], decisive: bool) -> Predicate:
    """The parts combined: `decisive` as soon as one part says it, else unknown if any is, else `not decisive`."""
    if len(parts) == 2:  # the common case, without the loop
        first, second = parts

        def pair(tag: str | None, properties: Mapping[str, str]) -> bool | None:
            answer = first(tag, properties)
            if answer is decisive:
                return decisive
            other = second(tag, properties)
            if other is decisive:
                return decisive
            return None if answer is None or other is None else not decisive

        return pair

    def each(tag: str | None, properties: Mapping[str, str]) -> bool | None:
        unknown = False
        for part in parts:
            answer = part(tag, properties)
            if answer is decisive:
                return decisive
            unknown = unknown or answer is None
        return None if unknown else not decisive

    return each


def compared_with_literal(get: Getter, op: str, literal: Value) -> Predicate:
    """`property op literal`: the property is read as the literal's type first."""
    compare = OPERATORS[op]
    if isinstance(literal, str):

        def test_text(tag: str | None, properties: Mapping[str, str]) -> bool | None:
            text = get(tag, properties)
            return None if text is None else compare(text, literal)

        return test_text
    read: Callable[[str], Value] = as_boolean if isinstance(literal, bool) else as_number

    def test(tag: str | None, properties: Mapping[str, str]) -> bool | None:
        text = get(tag, properties)
        if text is None:
            return None
        value = read(text)
        return None if value is None else compare(value, literal)

    return test


def compared_with_property(get: Getter, op: str, get_other: Getter) -> Predicate:
    """`property op property`: `=` and `<>` compare the texts, the others the numbers."""
    compare = OPERATORS[op]
    read: Callable[[str], Value] = str if op in EQUALITY else as_number

    def test(tag: str | None, properties: Mapping[str, str]) -> bool | None:
        text, other = get(tag, properties), get_other(tag, properties)
        if text is None or other is None:
            return None
        value, other_value = read(text), read(other)
        return None if value is None or other_value is None else compare(value, other_value)

    return test


def literals_compared(op: str, left: Value, right: Value) -> bool | None:
    """`literal op literal`, decided once when compiling; unknown across types."""
    if left is None or right is None or kind_of(left) != kind_of(right):
        return None
    return OPERATORS[op](left, right)


def in_range(get: Getter, low: float, high: float, negated: bool) -> Predicate:
    """`property [NOT] BETWEEN low AND high` with number bounds, in one closure."""

    def test(tag: str | None, properties: Mapping[str, str]) -> bool | None:
        text = get(tag, properties)
        if text is None:
            return None
        value = as_number(text)
        return None if value is None else (low <= value <= high) != negated

    return test


def member(get: Getter, texts: frozenset[str], negated: bool) -> Predicate:
    def test(tag: str | None, properties: Mapping[str, str]) -> bool | None:
        text = get(tag, properties)
        return None if text is None else (text in texts) != negated

    return test


def text_test(get: Getter, keyword: str, search: str, negated: bool) -> Predicate:
    """CONTAINS, STARTSWITH, ENDSWITH; as in RocketMQ, an empty search text matches nothing."""
    if not search:
        return constant(False)
    found_in = TEXT_TESTS[keyword]

    def test(tag: str | None, properties: Mapping[str, str]) -> bool | None:
        text = get(tag, properties)
        return None if text is None else found_in(text, search) != negated

    return test


def is_null(get: Getter, negated: bool) -> Predicate:
    def test(tag: str | None, properties: Mapping[str, str]) -> bool | None:
        return (get(tag, properties) is None) != negated

    return test


def truth_of(get: Getter) -> Predicate:
    """A property used as a condition on its own: its value read as a boolean."""

    def test(tag: str | None, properties: Mapping[str, str]) -> bool | None:
        text = get(tag, properties)
        return None if text is None else as_boolean(text)

    return test
