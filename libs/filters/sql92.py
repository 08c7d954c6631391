"""SQL92 filters: RocketMQ's message selector language, compiled once into closures.

    condition := condition OR condition | condition AND condition | NOT condition
               | ( condition ) | operand
               | operand (= | <> | > | >= | < | <=) operand
               | name [NOT] BETWEEN operand AND operand
               | name [NOT] IN ( string, ... )
               | name IS [NOT] NULL
               | name [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string
    operand   := name | number | string | TRUE | FALSE | NULL

NOT binds tighter than AND, AND tighter than OR. Keywords are case-insensitive;
property names are case-sensitive and `TAGS` is the message's tag. Numbers are
integers or decimals (`-1.5e3`); strings are single-quoted, `''` being a quote.
`--` and `/* */` are comments. As in RocketMQ, `> >= < <=` and BETWEEN compare
numbers only, NULL is tested with IS NULL, and IN lists strings. What a NULL or
an unreadable value does is described in `libs.filters.predicates`.

An expression is measured against its `FilterLimits` (conditions, parentheses, IN
lists) by a pass of the lexer before lark builds a tree; nesting of AND, OR and NOT
is measured on the tree, before it is compiled.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from lark import Lark, Token, Tree, UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from libs.errors import InvalidFilter
from libs.filters import predicates as p
from libs.filters.limits import DEFAULT_LIMITS, FilterLimits
from libs.filters.predicates import Predicate, Value

GRAMMAR: Final = r"""
?start: or_expr
?or_expr: and_expr (_OR and_expr)*
?and_expr: not_expr (_AND not_expr)*
?not_expr: _NOT not_expr -> negation
         | predicate
?predicate: operand COMPARISON operand -> compare
          | NAME _BETWEEN operand _AND operand -> between
          | NAME _NOT _BETWEEN operand _AND operand -> not_between
          | NAME _IN "(" STRING ("," STRING)* ")" -> member
          | NAME _NOT _IN "(" STRING ("," STRING)* ")" -> not_member
          | NAME _IS NULL -> is_null
          | NAME _IS _NOT NULL -> is_not_null
          | NAME _text_test STRING -> text_test
          | NAME _NOT _text_test STRING -> not_text_test
          | "(" or_expr ")"
          | operand -> condition
?operand: NAME -> property
        | NUMBER -> number
        | STRING -> string
        | TRUE -> true
        | FALSE -> false
        | NULL -> null
_text_test: CONTAINS | STARTSWITH | ENDSWITH

_OR: "OR"i
_AND: "AND"i
_NOT: "NOT"i
_BETWEEN: "BETWEEN"i
_IN: "IN"i
_IS: "IS"i
TRUE: "TRUE"i
FALSE: "FALSE"i
NULL: "NULL"i
CONTAINS: "CONTAINS"i
STARTSWITH: "STARTSWITH"i
ENDSWITH: "ENDSWITH"i
COMPARISON: "<>" | ">=" | "<=" | "=" | ">" | "<"
NAME: /[a-z_][a-z0-9_.]*/i
NUMBER: /[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:e[+-]?[0-9]+)?/i
STRING: /'(?:[^']|'')*'/

%ignore /\s+/
%ignore /--[^\n]*/
%ignore /\/\*[\s\S]*?\*\//
"""


@functools.cache
def _parser() -> Lark:
    return Lark(GRAMMAR, parser="lalr", lexer="basic", propagate_positions=True)


@dataclass(frozen=True, slots=True)
class Sql92Filter:
    """Messages for which `expression` is true; the broker cannot tell from the tag code."""

    expression: str
    predicate: Predicate = field(repr=False, compare=False)

    @classmethod
    def parse(cls, expression: str, limits: FilterLimits = DEFAULT_LIMITS) -> Sql92Filter:
        compiler = _Compiler(expression, limits)
        try:
            compiler.measure(_parser().lex(expression))
            tree = _parser().parse(expression)
        except UnexpectedInput as exc:
            raise compiler.invalid(*_where_and_why(expression, exc)) from exc
        return cls(expression, compiler.condition(tree, 1))

    def matches_code(self, tags_code: int) -> bool:
        return True

    def matches(self, tag: str | None, properties: Mapping[str, str]) -> bool:
        return self.predicate(tag, properties) is True


def _where_and_why(expression: str, exc: UnexpectedInput) -> tuple[int, str]:
    """The 1-based position lark stopped at, and what it found there."""
    if isinstance(exc, UnexpectedToken) and exc.token.type == "$END":
        return len(expression.rstrip()) + 1, "unexpected end of expression"
    if isinstance(exc, UnexpectedToken):
        return (exc.token.start_pos or 0) + 1, f"unexpected {exc.token.value!r}"
    if isinstance(exc, UnexpectedCharacters) and exc.char == "'":
        return (exc.pos_in_stream or 0) + 1, "string is not closed"
    if isinstance(exc, UnexpectedCharacters):
        return (exc.pos_in_stream or 0) + 1, f"unexpected {exc.char!r}"
    return (exc.pos_in_stream or 0) + 1, "unexpected input"


@dataclass(frozen=True, slots=True)
class _Property:
    name: str


@dataclass(frozen=True, slots=True)
class _Literal:
    value: Value
    text: str
    position: int


_Operand = _Property | _Literal

_CONNECTIVES: Final[dict[str, Callable[[list[Predicate]], Predicate]]] = {
    "or_expr": p.any_of,
    "and_expr": p.all_of,
    "negation": lambda inner: p.negation(inner[0]),
}


@dataclass(frozen=True, slots=True)
class _Compiler:
    """Turns a parse tree into predicates, rejecting what parses but cannot be evaluated."""

    expression: str
    limits: FilterLimits

    def invalid(self, position: int, reason: str) -> InvalidFilter:
        return InvalidFilter(
            f"SQL92 expression {self.expression!r} is invalid at position {position}: {reason}",
            position=position,
        )

    def measure(self, tokens: Iterable[Token]) -> None:
        """Refuse, from the tokens alone, an expression past the limits on conditions, parentheses and IN lists."""
        limits = self.limits
        conditions, depth, listed = 1, 0, -1  # listed: strings in the IN list being read, -1 outside one
        after_in = False
        for token in tokens:
            kind, position = token.type, (token.start_pos or 0) + 1
            if kind in ("_AND", "_OR"):
                conditions += 1
            elif kind == "_BETWEEN":
                conditions -= 1  # its AND joins two bounds, not two conditions
            elif kind == "LPAR" and after_in:
                listed = 0
            elif kind == "LPAR":
                depth += 1
                if depth > limits.max_nesting:
                    raise self.invalid(position, f"parentheses nest more than {limits.max_nesting} deep")
            elif kind == "RPAR" and listed < 0:
                depth -= 1
            elif kind == "RPAR":
                listed = -1
            elif kind == "STRING" and listed >= 0:
                listed += 1
                if listed > limits.max_in_list:
                    raise self.invalid(position, f"an IN list holds more than {limits.max_in_list} strings")
            if conditions > limits.max_conditions:
                raise self.invalid(position, f"more than {limits.max_conditions} conditions")
            after_in = kind == "_IN"

    def condition(self, node: Tree[Token], depth: int) -> Predicate:
        combine = _CONNECTIVES.get(node.data)
        if combine is not None:
            return combine(self.conditions(node, depth))
        match node.data:
            case "condition":
                return self.truth(_operand(_subtrees(node)[0]))
            case "compare":
                left, right = (_operand(child) for child in _subtrees(node))
                op = str(_tokens(node)[0])
                return self.comparison(left, op, right, f"'{op}'")
            case "between" | "not_between":
                return self.between(node, negated=node.data == "not_between")
        return self.test(node)

    def conditions(self, node: Tree[Token], depth: int) -> list[Predicate]:
        limit = self.limits.max_nesting
        if depth >= limit:
            raise self.invalid(node.meta.start_pos + 1, f"conditions nest more than {limit} deep")
        return [self.condition(child, depth + 1) for child in _subtrees(node)]

    def test(self, node: Tree[Token]) -> Predicate:
        """A predicate on one property, named by the first token."""
        name, *rest = _tokens(node)
        get = p.getter(str(name))
        match node.data:
            case "member" | "not_member":
                texts = frozenset(_unquote(text) for text in rest)
                return p.member(get, texts, negated=node.data == "not_member")
            case "is_null" | "is_not_null":
                return p.is_null(get, negated=node.data == "is_not_null")
        keyword, search = rest
        return p.text_test(get, keyword.upper(), _unquote(search), negated=node.data == "not_text_test")

    def truth(self, operand: _Operand) -> Predicate:
        if isinstance(operand, _Property):
            return p.truth_of(p.getter(operand.name))
        if operand.value is None or isinstance(operand.value, bool):
            return p.constant(operand.value)
        raise self.invalid(operand.position, f"{operand.text} is not a condition")

    def comparison(self, left: _Operand, op: str, right: _Operand, label: str) -> Predicate:
        for side in (left, right):
            if isinstance(side, _Literal):
                self.check_operand(side, op, label)
        if isinstance(left, _Literal) and isinstance(right, _Literal):
            return p.constant(p.literals_compared(op, left.value, right.value))
        if isinstance(left, _Literal):
            return self.comparison(right, p.MIRRORED[op], left, label)
        if isinstance(right, _Literal):
            return p.compared_with_literal(p.getter(left.name), op, right.value)
        return p.compared_with_property(p.getter(left.name), op, p.getter(right.name))

    def check_operand(self, literal: _Literal, op: str, label: str) -> None:
        if op in p.ORDERING and not p.is_number(literal.value):
            raise self.invalid(literal.position, f"{label} compares numbers only, not {literal.text}")
        if literal.value is None:
            raise self.invalid(literal.position, f"{label} cannot compare with NULL: use IS NULL or IS NOT NULL")

    def between(self, node: Tree[Token], negated: bool) -> Predicate:
        subject = _Property(str(_tokens(node)[0]))
        low, high = (_operand(child) for child in _subtrees(node))
        if isinstance(low, _Literal) and isinstance(high, _Literal):
            low_value, high_value = self.bound(low), self.bound(high)
            if low_value > high_value:
                raise self.invalid(low.position, f"BETWEEN {low.text} AND {high.text} is empty")
            return p.in_range(p.getter(subject.name), low_value, high_value, negated)
        if negated:
            outside = [self.comparison(subject, "<", low, "BETWEEN"), self.comparison(subject, ">", high, "BETWEEN")]
            return p.any_of(outside)
        inside = [self.comparison(subject, ">=", low, "BETWEEN"), self.comparison(subject, "<=", high, "BETWEEN")]
        return p.all_of(inside)

    def bound(self, literal: _Literal) -> int | float:
        if isinstance(literal.value, bool) or not isinstance(literal.value, int | float):
            raise self.invalid(literal.position, f"BETWEEN compares numbers only, not {literal.text}")
        return literal.value


def _operand(node: Tree[Token]) -> _Operand:
    token = _tokens(node)[0]
    text = str(token)
    if node.data == "property":
        return _Property(text)
    values: dict[str, Value] = {"true": True, "false": False, "null": None}
    value: Value
    if node.data == "number":
        value = float(text) if any(mark in text for mark in ".eE") else int(text)
    elif node.data == "string":
        value = _unquote(token)
    else:
        value = values[node.data]
    return _Literal(value, text, (token.start_pos or 0) + 1)


def _unquote(token: Token) -> str:
    return str(token)[1:-1].replace("''", "'")


def _tokens(node: Tree[Token]) -> list[Token]:
    return [child for child in node.children if isinstance(child, Token)]


def _subtrees(node: Tree[Token]) -> list[Tree[Token]]:
    return [child for child in node.children if isinstance(child, Tree)]
