"""SQL text to typed Arrow expressions: the parser front end and the translator.

:class:`Translator` carries one piece of SQL text over one schema through
three steps::

    "total > 100"
        |  parse(): sqlglot, in a dialect where "x" and `x` both quote names
        v
    GT(Column total, Literal 100)
        |  term(): one rule per node type, looked up in sql_nodes.NODES
        v
    Typed(expr=(total > 100), type=bool)      columns = {"total"}

The rules live in :mod:`lakehouse.data.sql_nodes`; this module holds what
they share. Every rule returns a *term* (:mod:`lakehouse.data.literals`): a
literal stays untyped until it meets a type, so :meth:`Translator.pair`
types the literal side of an operator by the other side. Every Arrow call
goes through :meth:`Translator.call`, which binds the result against an
empty table of the schema at once: a type error surfaces now, as a
``ValueError`` that quotes the SQL that failed, not later in the middle of
a scan.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import TokenType, exp, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError

from lakehouse.data.literals import ARROW_ERRORS, Literal, Term, Typed, first_line, literal_scalar
from lakehouse.data.rows import plain_schema, value_scanner
from lakehouse.data.sql_nodes import NODES

_CLASS_NAME = re.compile(r"<class '(?:[\w.]+\.)?(\w+)'>")


class _LakehouseSQL(Dialect):
    """sqlglot's default dialect, with ``"ident"`` and ```ident``` both quoting names."""

    class Tokenizer(tokens.Tokenizer):
        IDENTIFIERS = ['"', "`"]


class Translator:
    """Translates one sqlglot tree over one schema; collects the columns it reads."""

    def __init__(self, text: str, schema: pa.Schema) -> None:
        self.text = text
        self.quoted = _shorten(text)
        self.schema = plain_schema(schema)  # as value_scanner reads the rows
        self.names = schema.names
        self.columns: set[str] = set()
        self._empty: pa.Table | None = None

    # -- parsing and typing --------------------------------------------------

    def parse(self) -> exp.Expression:
        """The sqlglot tree of the text: exactly one expression, or ValueError."""
        if not self.text.strip():
            raise ValueError("empty SQL expression")
        try:
            trees = sqlglot.parse(self.text, dialect=_LakehouseSQL)
        except ParseError as exc:
            raise ValueError(f"invalid SQL {self.quoted}: {_describe(exc)}") from None
        except SqlglotError as exc:  # TokenError: an unterminated string or identifier
            raise ValueError(f"invalid SQL {self.quoted}: {exc}") from None
        except RecursionError:
            raise ValueError(f"invalid SQL {self.quoted}: nested too deeply") from None
        if len(trees) != 1 or not isinstance(trees[0], exp.Expression):
            raise ValueError(f"invalid SQL {self.quoted}: expected one expression, not statements")
        return trees[0]

    def type_of(self, expr: pc.Expression, what: str) -> pa.DataType:
        """The Arrow type of ``expr`` over the schema (bound, not computed); ValueError if none."""
        if self._empty is None:
            self._empty = self.schema.empty_table()
        try:
            scanner = value_scanner(self._empty, expr)
        except ARROW_ERRORS as exc:
            raise self.failed(what, exc) from None
        return scanner.projected_schema.field("value").type

    def failed(self, what: str, exc: BaseException) -> ValueError:
        return ValueError(f"cannot evaluate {what} in {self.quoted}: {first_line(exc)}")

    def typed(self, node: exp.Expression, hint: pa.DataType | None = None) -> Typed:
        """``node`` translated, a literal typed by ``hint`` (the type it meets)."""
        term = self.term(node)
        return self.resolve(term, hint) if isinstance(term, Literal) else term

    def resolve(self, literal: Literal, hint: pa.DataType | None) -> Typed:
        scalar = self.scalar(literal, hint)
        return Typed(pc.scalar(scalar), scalar.type)

    def scalar(self, literal: Literal, hint: pa.DataType | None) -> pa.Scalar:
        """The literal as an Arrow scalar of a type comparable with ``hint``, exactly."""
        try:
            return literal_scalar(literal, hint)
        except ValueError as exc:
            raise ValueError(f"{exc} in {self.quoted}") from None

    def call(
        self, node: exp.Expression, fn: Callable[..., pc.Expression], *args: Any, **kw: Any
    ) -> Typed:
        """``fn(*args, **kw)`` (``Typed`` args unwrapped) with its type checked now."""
        raw = [a.expr if isinstance(a, Typed) else a for a in args]
        try:
            expr = fn(*raw, **kw)
        except ARROW_ERRORS as exc:
            raise self.failed(self.quote(node), exc) from None
        return Typed(expr, self.type_of(expr, self.quote(node)))

    def pair(self, left: exp.Expression, right: exp.Expression) -> tuple[Typed, Typed]:
        """Both operands of a binary operator, a literal typed by the other side."""
        a, b = self.term(left), self.term(right)
        if isinstance(a, Literal) and isinstance(b, Literal):
            if a.kind == "null" and b.kind == "null":
                return self.resolve(a, pa.bool_()), self.resolve(b, pa.bool_())
            if a.kind == "null":
                tb = self.resolve(b, None)
                return self.resolve(a, tb.type), tb
            ta = self.resolve(a, None)
            return ta, self.resolve(b, ta.type)
        if isinstance(a, Literal):
            assert isinstance(b, Typed)
            return self.resolve(a, b.type), b
        if isinstance(b, Literal):
            return a, self.resolve(b, a.type)
        return a, b

    def quote(self, node: exp.Expression) -> str:
        """``node``'s SQL, quoted for an error message."""
        return _shorten(node.sql())

    def unsupported(self, node: exp.Expression, what: str | None = None) -> ValueError:
        kind = what or f"SQL construct {type(node).__name__}"
        return ValueError(f"unsupported {kind} {self.quote(node)} in {self.quoted}")

    # -- the tree, node by node ------------------------------------------------

    def term(self, node: exp.Expression) -> Term:
        """``node`` translated; a literal stays untyped until it meets a type."""
        try:
            rule = NODES[type(node)]
        except KeyError:
            if isinstance(node, exp.Func) and not isinstance(node, exp.Case | exp.If):
                name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
                raise self.unsupported(node, f"function {name.lower()}()") from None
            raise self.unsupported(node) from None
        try:
            return rule(self, node)
        except RecursionError:
            raise ValueError(f"invalid SQL {self.quoted}: nested too deeply") from None

    def column_name(self, name: str, quoted: bool) -> str:
        """The schema's column for ``name``: exact, or case-folded when bare and unambiguous."""
        if name in self.names:
            return name
        if not quoted:
            folded = [n for n in self.names if n.lower() == name.lower()]
            if len(folded) == 1:
                return cast(str, folded[0])
        listed = ", ".join(self.names) or "(none)"
        raise ValueError(
            f"unknown column {name!r} in {self.quoted}; the table's columns are: {listed}"
        )


def string_literal(value: str) -> str:
    """``value`` spelled as a string literal this parser reads back exactly: quoted
    with ``'``, a quote doubled, a backslash as is (this dialect has no escapes)."""
    return "'" + value.replace("'", "''") + "'"


def string_values(text: str) -> list[str] | None:
    """The values of the string literals this parser reads in ``text``, in order;
    None when the text does not tokenize."""
    try:
        found = _LakehouseSQL().tokenize(text)
    except SqlglotError:
        return None
    return [t.text for t in found if t.token_type is TokenType.STRING]


def _describe(exc: ParseError) -> str:
    """sqlglot's first error, without its terminal underlining."""
    if not exc.errors:
        return str(exc)
    err = exc.errors[0]
    description = _CLASS_NAME.sub(r"\1", str(err.get("description", "")))
    where = f"line {err.get('line')}, column {err.get('col')}"
    near = err.get("highlight")
    return f"{description} ({where}{f', near {near!r}' if near else ''})"


def _shorten(text: str, limit: int = 120) -> str:
    """``repr(text)``, cut in the middle when long (error messages quote user input)."""
    if len(text) <= limit:
        return repr(text)
    half = limit // 2
    return f"{text[:half]!r}...{text[-half:]!r}"
