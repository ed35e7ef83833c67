"""Row predicates and update values: SQL text to pyarrow compute expressions.

Users filter rows with ``where`` (``read``, ``delete``, ``update``,
``overwrite``) and compute new values with ``update``'s ``values``. Both
arrive as SQL text over the table's column names (or, for ``where``, a
ready-made :class:`pyarrow.compute.Expression`); both leave this module as a
``pc.Expression`` that Arrow evaluates over a table or a Parquet scan::

    "status = 'open' AND total > 100"
        |  sqlglot.parse (a dialect with "quoted" and `quoted` identifiers)
        v
    And(EQ(Column status, Literal 'open'), GT(Column total, Literal 100))
        |  _Translator: names checked against the schema, literals typed,
        v  every node's Arrow type known (so errors name the SQL that failed)
    ((status == "open") and (total > 100))       (and_kleene; 100 a decimal128(3, 0))

sqlglot does the parsing; this module only translates its tree, node by
node, into Arrow compute calls. A node it does not know (a subquery, an
alias, ``CASE``, an unknown function) is refused with a ``ValueError`` that
names it, never guessed at.

Literals take their type from what they meet. ``100`` alone is an int64, but
compared with (or added to) a ``decimal128(10, 2)`` column it becomes an
exact decimal, next to an int32 column an int32, and ``'2024-01-02'``
compared with a ``date32`` column is a date, with a
``timestamp[us, tz=UTC]`` column a timestamp (a time without an offset is
read in the column's time zone; one with an offset is an instant, refused
for a column without a time zone). ``TIMESTAMP '...'`` behaves the same;
``DATE '...'`` and ``CAST(... AS type)`` fix their type. A literal that
cannot be read exactly as the type it meets (``'2024-13-01'`` for a date,
``'abc'`` for an int) raises ``ValueError``.

NULL follows SQL: a comparison or arithmetic with null is null, ``AND`` and
``OR`` are three-valued (``NULL AND FALSE`` is false), ``x IN (1, NULL)`` is
null unless x is 1, ``NOT`` of null is null. :func:`matches` counts a null
as not matching, as a ``WHERE`` clause does::

    x      x > 1   NOT x > 1   x IN (2, NULL)   matches(x > 1)
    1      false   true        null             false
    2      true    false       true             true
    null   null    null        null             false

Supported SQL: ``= != <> < <= > >=``, ``AND OR NOT``, parentheses, ``IS
[NOT] NULL``, ``IS [NOT] TRUE/FALSE``, ``[NOT] IN (list)``, ``[NOT] BETWEEN
a AND b``, ``[NOT] LIKE`` and ``ILIKE`` (``%`` and ``_``, optional
``ESCAPE``), ``+ - * / %`` and unary minus (checked: an overflow or a
division by zero raises; integer ``/`` truncates, ``%`` has the sign of the
dividend), ``||``, literals (integers, decimals, floats, ``'strings'``,
``TRUE``/``FALSE``, ``NULL``, ``DATE '...'``, ``TIMESTAMP '...'``),
``CAST(x AS type)`` (``BOOLEAN``, ``TINYINT`` .. ``BIGINT`` and unsigned,
``FLOAT``, ``DOUBLE``, ``DECIMAL(p, s)``, ``VARCHAR``/``TEXT``/``STRING``,
``BINARY``, ``DATE``, ``TIMESTAMP``, ``TIMESTAMPTZ``, ``TIME``; a fraction
is truncated, an overflow or unreadable string raises), column names bare
(case-insensitive when no column has the exact name) or quoted (``"my
col"``, ```my col```), and the functions ``lower``, ``upper``, ``length``,
``trim``, ``abs``, ``round`` and ``coalesce``.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import sqlglot
from sqlglot import exp, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, SqlglotError

__all__ = ["Predicate", "evaluate", "matches", "parse_value", "parse_where"]

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


@dataclass(frozen=True, eq=False)  # compared by identity: Expression == builds an Expression
class Predicate:
    """A parsed ``where``: a boolean row filter over a table's columns."""

    expression: pc.Expression
    """Boolean (null counts as not matching, see :func:`matches`)."""
    columns: frozenset[str] | None
    """The columns the filter reads; None when unknown (a ``pc.Expression`` given by the user)."""
    text: str
    """The SQL text as given, or ``str(expression)``."""


class _LakehouseSQL(Dialect):
    """sqlglot's default dialect, with ``"ident"`` and ```ident``` both quoting names."""

    class Tokenizer(tokens.Tokenizer):
        IDENTIFIERS = ['"', "`"]


# ---------------------------------------------------------------------------
# public functions
# ---------------------------------------------------------------------------


def parse_where(where: str | pc.Expression, schema: pa.Schema) -> Predicate:
    """A :class:`Predicate` from SQL text or a ``pc.Expression`` over ``schema``'s columns.

    Raises :class:`ValueError` for bad SQL, an unknown column, an unsupported
    construct or a non-boolean expression; :class:`TypeError` when ``where``
    is neither a string nor an expression.
    """
    if isinstance(where, pc.Expression):
        return Predicate(_check_expression(where, schema), None, str(where))
    if not isinstance(where, str):
        raise TypeError(
            "where must be a SQL string or a pyarrow.compute.Expression,"
            f" not {type(where).__name__}"
        )
    translator = _Translator(where, schema)
    result = translator.typed(translator.parse(), pa.bool_())
    if not (pa.types.is_boolean(result.type) or pa.types.is_null(result.type)):
        raise ValueError(
            f"where {translator.quoted} is not a boolean expression (its type is {result.type})"
        )
    return Predicate(result.expr, frozenset(translator.columns), where)


def parse_value(
    value: Any, schema: pa.Schema, target: pa.Field
) -> tuple[pc.Expression, frozenset[str]]:
    """The new value of column ``target`` for ``update``, and the columns it reads.

    A string is a SQL value expression over ``schema``'s columns
    (``"'shipped'"``, ``"total * 2"``, ``"NULL"``), any other value a Python
    literal (int, float, bool, None, Decimal, datetime, date, bytes...). The
    result has ``target``'s type: a literal is converted now, exactly; an
    expression is cast when the update runs (a safe cast: a value that does
    not fit raises). A type that cannot be cast safely, a lossy literal or a
    null for a non-nullable column raises :class:`ValueError` naming the column.
    """
    name = target.name
    if isinstance(value, str):
        translator = _Translator(value, schema)
        try:
            term = translator.term(translator.parse())
        except ValueError as exc:
            raise ValueError(f"value for column {name!r}: {exc}") from None
        if isinstance(term, _Literal):
            scalar = translator.scalar(term, target.type)
            return pc.scalar(_assign_scalar(scalar, target, translator.quoted)), frozenset()
        if term.type != target.type:
            if not _assignable(term.type, target.type):
                raise ValueError(
                    f"cannot assign {translator.quoted} ({term.type}) to column {name!r}"
                    f" ({target.type}): the cast is not safe"
                )
            cast = _widening_cast(term, target.type)
            translator.type_of(cast, f"the cast to column {name!r} ({target.type})")
            term = _Typed(cast, target.type)
        return term.expr, frozenset(translator.columns)
    scalar = _python_scalar(value, target)
    return pc.scalar(_assign_scalar(scalar, target, repr(value))), frozenset()


def evaluate(table: pa.Table | pa.RecordBatch, expression: pc.Expression) -> pa.ChunkedArray:
    """``expression`` computed over every row of ``table``, in row order.

    Errors of the computation (an overflow, a division by zero, a value a
    safe cast cannot convert) raise ``pyarrow.ArrowInvalid``, a ValueError.
    """
    return ds.dataset(table).to_table(columns={"value": expression}).column("value")


def matches(table: pa.Table | pa.RecordBatch, predicate: Predicate) -> pa.Array:
    """A boolean mask of ``table``'s rows that satisfy ``predicate``; null counts as False."""
    mask = evaluate(table, predicate.expression)
    if not pa.types.is_boolean(mask.type):
        mask = mask.cast(pa.bool_())
    return pc.fill_null(mask, False).combine_chunks()


# ---------------------------------------------------------------------------
# translation
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Typed:
    """A translated sub-expression and its Arrow type."""

    expr: pc.Expression
    type: pa.DataType


@dataclass(frozen=True)
class _Literal:
    """A literal whose Arrow type is decided by what it meets (see the module docstring).

    ``kind`` is ``"number"`` (``value`` the SQL text), ``"string"``,
    ``"timestamp"`` (``TIMESTAMP '...'``), ``"bool"`` or ``"null"``.
    """

    kind: str
    value: Any


_Term = _Typed | _Literal

_COMPARISONS: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.EQ: pc.equal,
    exp.NEQ: pc.not_equal,
    exp.LT: pc.less,
    exp.LTE: pc.less_equal,
    exp.GT: pc.greater,
    exp.GTE: pc.greater_equal,
}
_ARITHMETIC: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.Add: pc.add_checked,
    exp.Sub: pc.subtract_checked,
    exp.Mul: pc.multiply_checked,
    exp.Div: pc.divide_checked,
}
_SQL_TYPES: dict[Any, pa.DataType] = {  # sqlglot's DataType.Type -> Arrow
    exp.DataType.Type.BOOLEAN: pa.bool_(),
    exp.DataType.Type.TINYINT: pa.int8(),
    exp.DataType.Type.SMALLINT: pa.int16(),
    exp.DataType.Type.INT: pa.int32(),
    exp.DataType.Type.BIGINT: pa.int64(),
    exp.DataType.Type.UTINYINT: pa.uint8(),
    exp.DataType.Type.USMALLINT: pa.uint16(),
    exp.DataType.Type.UINT: pa.uint32(),
    exp.DataType.Type.UBIGINT: pa.uint64(),
    exp.DataType.Type.FLOAT: pa.float32(),
    exp.DataType.Type.DOUBLE: pa.float64(),
    exp.DataType.Type.VARCHAR: pa.string(),
    exp.DataType.Type.CHAR: pa.string(),
    exp.DataType.Type.TEXT: pa.string(),
    exp.DataType.Type.BINARY: pa.binary(),
    exp.DataType.Type.VARBINARY: pa.binary(),
    exp.DataType.Type.DATE: pa.date32(),
    exp.DataType.Type.TIMESTAMP: pa.timestamp("us"),
    exp.DataType.Type.DATETIME: pa.timestamp("us"),
    exp.DataType.Type.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
    exp.DataType.Type.TIME: pa.time64("us"),
}
_SIZED_TYPES = {  # VARCHAR(20) and such: the size is ignored
    exp.DataType.Type.VARCHAR,
    exp.DataType.Type.CHAR,
    exp.DataType.Type.BINARY,
    exp.DataType.Type.VARBINARY,
}
_DEFAULT_DECIMAL = (38, 9)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT64_MAX = (1 << 64) - 1
_CLASS_NAME = re.compile(r"<class '(?:[\w.]+\.)?(\w+)'>")
_FIELD_REF = re.compile(r"FieldRef\.Name\((.*?)\)")


class _Translator:
    """Translates one sqlglot tree over one schema; collects the columns it reads."""

    def __init__(self, text: str, schema: pa.Schema) -> None:
        self.text = text
        self.quoted = _shorten(text)
        self.schema = schema
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
            scanner = ds.dataset(self._empty).scanner(columns={"value": expr})
        except _ARROW_ERRORS as exc:
            raise self.failed(what, exc) from None
        return scanner.projected_schema.field("value").type

    def failed(self, what: str, exc: BaseException) -> ValueError:
        return ValueError(f"cannot evaluate {what} in {self.quoted}: {_first_line(exc)}")

    def typed(self, node: exp.Expression, hint: pa.DataType | None = None) -> _Typed:
        """``node`` translated, a literal typed by ``hint`` (the type it meets)."""
        term = self.term(node)
        return self.resolve(term, hint) if isinstance(term, _Literal) else term

    def resolve(self, literal: _Literal, hint: pa.DataType | None) -> _Typed:
        scalar = self.scalar(literal, hint)
        return _Typed(pc.scalar(scalar), scalar.type)

    def scalar(self, literal: _Literal, hint: pa.DataType | None) -> pa.Scalar:
        """The literal as an Arrow scalar of a type comparable with ``hint``, exactly."""
        try:
            return _literal_scalar(literal, hint)
        except ValueError as exc:
            raise ValueError(f"{exc} in {self.quoted}") from None

    def call(
        self, node: exp.Expression, fn: Callable[..., pc.Expression], *args: Any, **kw: Any
    ) -> _Typed:
        """``fn(*args, **kw)`` (``_Typed`` args unwrapped) with its type checked now."""
        raw = [a.expr if isinstance(a, _Typed) else a for a in args]
        try:
            expr = fn(*raw, **kw)
        except _ARROW_ERRORS as exc:
            raise self.failed(_shorten(node.sql()), exc) from None
        return _Typed(expr, self.type_of(expr, _shorten(node.sql())))

    def pair(self, left: exp.Expression, right: exp.Expression) -> tuple[_Typed, _Typed]:
        """Both operands of a binary operator, a literal typed by the other side."""
        a, b = self.term(left), self.term(right)
        if isinstance(a, _Literal) and isinstance(b, _Literal):
            if a.kind == "null" and b.kind == "null":
                return self.resolve(a, pa.bool_()), self.resolve(b, pa.bool_())
            if a.kind == "null":
                tb = self.resolve(b, None)
                return self.resolve(a, tb.type), tb
            ta = self.resolve(a, None)
            return ta, self.resolve(b, ta.type)
        if isinstance(a, _Literal):
            assert isinstance(b, _Typed)
            return self.resolve(a, b.type), b
        if isinstance(b, _Literal):
            return a, self.resolve(b, a.type)
        return a, b

    def unsupported(self, node: exp.Expression, what: str | None = None) -> ValueError:
        kind = what or f"SQL construct {type(node).__name__}"
        return ValueError(f"unsupported {kind} {_shorten(node.sql())} in {self.quoted}")

    # -- the tree, node by node ------------------------------------------------

    def term(self, node: exp.Expression) -> _Term:
        """``node`` translated; a literal stays untyped until it meets a type."""
        try:
            method = _NODES[type(node)]
        except KeyError:
            if isinstance(node, exp.Func) and not isinstance(node, exp.Case | exp.If):
                name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
                raise self.unsupported(node, f"function {name.lower()}()") from None
            raise self.unsupported(node) from None
        try:
            return method(self, node)
        except RecursionError:
            raise ValueError(f"invalid SQL {self.quoted}: nested too deeply") from None

    def paren(self, node: exp.Paren) -> _Term:
        return self.term(node.this)

    def column(self, node: exp.Column) -> _Term:
        if node.table or not isinstance(node.this, exp.Identifier):
            raise self.unsupported(node, "column reference")
        name = self._column_name(node.this.this, node.this.quoted)
        self.columns.add(name)
        return _Typed(pc.field(name), self.schema.field(name).type)

    def _column_name(self, name: str, quoted: bool) -> str:
        if name in self.names:
            return name
        if not quoted:
            folded = [n for n in self.names if n.lower() == name.lower()]
            if len(folded) == 1:
                return folded[0]
        listed = ", ".join(self.names) or "(none)"
        raise ValueError(
            f"unknown column {name!r} in {self.quoted}; the table's columns are: {listed}"
        )

    def literal(self, node: exp.Literal) -> _Term:
        return _Literal("string" if node.is_string else "number", node.this)

    def boolean(self, node: exp.Boolean) -> _Term:
        return _Literal("bool", bool(node.this))

    def null(self, node: exp.Null) -> _Term:
        return _Literal("null", None)

    def neg(self, node: exp.Neg) -> _Term:
        inner = self.term(node.this)
        if isinstance(inner, _Literal) and inner.kind == "number":
            text = inner.value
            return _Literal("number", text[1:] if text.startswith("-") else "-" + text)
        if isinstance(inner, _Literal):
            inner = self.resolve(inner, None)
        return self.call(node, pc.negate_checked, inner)

    def not_(self, node: exp.Not) -> _Term:
        return self.call(node, pc.invert, self._boolean(node.this))

    def _boolean(self, node: exp.Expression) -> _Typed:
        operand = self.typed(node, pa.bool_())
        if pa.types.is_null(operand.type):
            return _Typed(operand.expr.cast(pa.bool_()), pa.bool_())
        if not pa.types.is_boolean(operand.type):
            raise ValueError(
                f"{_shorten(node.sql())} is not a boolean ({operand.type}) in {self.quoted}"
            )
        return operand

    def connective(self, node: exp.And | exp.Or) -> _Term:
        """A chain ``a AND b AND c`` flattened, so a long one does not recurse deeply."""
        fn = pc.and_kleene if isinstance(node, exp.And) else pc.or_kleene
        operands = [self._boolean(o) for o in node.flatten() if isinstance(o, exp.Expression)]
        result = operands[0].expr
        for operand in operands[1:]:  # booleans, so no need to type each step
            result = fn(result, operand.expr)
        return _Typed(result, pa.bool_())

    def comparison(self, node: exp.Expression) -> _Term:
        a, b = self.pair(node.this, node.expression)
        return self.call(node, _COMPARISONS[type(node)], a, b)

    def arithmetic(self, node: exp.Expression) -> _Term:
        a, b = self.pair(node.this, node.expression)
        return self.call(node, _ARITHMETIC[type(node)], a, b)

    def mod(self, node: exp.Mod) -> _Term:
        """``a % b`` as ``a - trunc(a / b) * b``: the remainder has the sign of ``a``."""
        a, b = self.pair(node.this, node.expression)
        quotient = self.call(node, pc.divide_checked, a, b)
        if not pa.types.is_integer(quotient.type):  # integer division already truncates
            quotient = self.call(node, pc.trunc, quotient)
        product = self.call(node, pc.multiply_checked, quotient, b)
        return self.call(node, pc.subtract_checked, a, product)

    def concat(self, node: exp.DPipe) -> _Term:
        a, b = self.pair(node.this, node.expression)
        separator = pa.scalar("", a.type if pa.types.is_large_string(a.type) else pa.string())
        return self.call(node, pc.binary_join_element_wise, a, b, pc.scalar(separator))

    def is_(self, node: exp.Is) -> _Term:
        operand = self.typed(node.this)
        right = node.expression
        if isinstance(right, exp.Null):
            result = self.call(node, pc.is_null, operand)
        elif isinstance(right, exp.Boolean):
            equal = self.call(node, pc.equal, operand, pc.scalar(bool(right.this)))
            result = self.call(node, pc.coalesce, equal, pc.scalar(False))
        else:
            raise self.unsupported(node, "IS test")
        return self.call(node, pc.invert, result) if node.args.get("negate") else result

    def in_(self, node: exp.In) -> _Term:
        if any(node.args.get(k) for k in ("query", "unnest", "field")) or not node.expressions:
            raise self.unsupported(node, "IN (only a list of values is)")
        value = self.typed(node.this)
        items = [self.term(item) for item in node.expressions]
        value_set = self._value_set(items, value.type)
        result: _Typed | None = None
        if value_set is not None:  # all literals of the value's type: one hash lookup
            found = self.call(node, pc.is_in, value, value_set=value_set, skip_nulls=True)
            null = pc.scalar(pa.scalar(None, pa.bool_()))
            # SQL: NULL IN (...) is null, and so is a miss when the list holds a NULL.
            # Written as `found OR (value IS NULL AND NULL)`, not as an if_else, so
            # that pruning files by column bounds still sees the is_in.
            if len(value_set) < len(items):
                unknown = _Typed(null, pa.bool_())
            else:
                unknown = self.call(node, pc.and_kleene, self.call(node, pc.is_null, value), null)
            result = self.call(node, pc.or_kleene, found, unknown)
        else:
            for item in items:
                other = self.resolve(item, value.type) if isinstance(item, _Literal) else item
                equal = self.call(node, pc.equal, value, other)
                result = equal if result is None else self.call(node, pc.or_kleene, result, equal)
        assert result is not None
        return self.call(node, pc.invert, result) if node.args.get("negate") else result

    def _value_set(self, items: list[_Term], value_type: pa.DataType) -> pa.Array | None:
        """The non-null items as an array of ``value_type``, if all are literals that fit it."""
        values = []
        for item in items:
            if not isinstance(item, _Literal):
                return None
            scalar = self.scalar(item, value_type)
            if not scalar.is_valid:
                continue
            if scalar.type != value_type:
                try:
                    scalar = scalar.cast(value_type, safe=True)
                except (*_ARROW_ERRORS, OverflowError):
                    return None  # compared one by one, with Arrow's type promotion
            values.append(scalar)
        try:
            return pa.array(values, value_type)
        except (*_ARROW_ERRORS, OverflowError):
            return None

    def between(self, node: exp.Between) -> _Term:
        if node.args.get("symmetric"):
            raise self.unsupported(node, "BETWEEN SYMMETRIC")
        value = self.typed(node.this)
        low, high = (self.typed(node.args[k], value.type) for k in ("low", "high"))
        result = self.call(
            node,
            pc.and_kleene,
            self.call(node, pc.greater_equal, value, low),
            self.call(node, pc.less_equal, value, high),
        )
        return self.call(node, pc.invert, result) if node.args.get("negate") else result

    def like(self, node: exp.Like | exp.ILike, escape: str | None = None) -> _Term:
        value = self.typed(node.this, pa.string())
        pattern = node.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise self.unsupported(node, "LIKE pattern (only a string literal is)")
        text = pattern.this if escape is None else _backslash_escapes(pattern.this, escape)
        result = self.call(
            node, pc.match_like, value, pattern=text, ignore_case=isinstance(node, exp.ILike)
        )
        return self.call(node, pc.invert, result) if node.args.get("negate") else result

    def escape(self, node: exp.Escape) -> _Term:
        inner, char = node.this, node.expression
        if not isinstance(inner, exp.Like | exp.ILike):
            raise self.unsupported(node, "ESCAPE (only after LIKE is)")
        if not (isinstance(char, exp.Literal) and char.is_string and len(char.this) == 1):
            raise self.unsupported(node, "ESCAPE (one character is)")
        return self.like(inner, char.this)

    def cast(self, node: exp.Cast) -> _Term:
        if isinstance(node, exp.TryCast):
            raise self.unsupported(node, "TRY_CAST")
        target = self._arrow_type(node.args["to"], node)
        operand = self.term(node.this)
        if isinstance(operand, _Literal):
            if operand.kind == "string" and target == pa.timestamp("us"):
                return _Literal("timestamp", operand.value)  # takes the time zone it meets
            scalar = self.scalar(operand, target)
            if scalar.type != target:
                try:
                    scalar = scalar.cast(options=_sql_cast(target))
                except (*_ARROW_ERRORS, OverflowError) as exc:
                    raise self.failed(_shorten(node.sql()), exc) from None
            return _Typed(pc.scalar(scalar), scalar.type)
        cast = operand.expr.cast(options=_sql_cast(target))
        return _Typed(cast, self.type_of(cast, _shorten(node.sql())))

    def _arrow_type(self, datatype: exp.DataType, node: exp.Expression) -> pa.DataType:
        kind = datatype.this
        if kind == exp.DataType.Type.DECIMAL:
            params = [p.this for p in datatype.expressions]
            if not params:
                return pa.decimal128(*_DEFAULT_DECIMAL)
            try:
                precision, scale = (
                    int(params[0].name),
                    int(params[1].name) if len(params) > 1 else 0,
                )
                return (
                    pa.decimal128(precision, scale)
                    if precision <= 38
                    else pa.decimal256(precision, scale)
                )
            except (ValueError, AttributeError, *_ARROW_ERRORS):
                raise self.unsupported(node, "DECIMAL parameters") from None
        if kind in _SQL_TYPES and (not datatype.expressions or kind in _SIZED_TYPES):
            return _SQL_TYPES[kind]
        raise self.unsupported(node, f"CAST type {datatype.sql()}")

    def lower_upper(self, node: exp.Lower | exp.Upper) -> _Term:
        fn = pc.utf8_lower if isinstance(node, exp.Lower) else pc.utf8_upper
        return self.call(node, fn, self.typed(node.this, pa.string()))

    def length(self, node: exp.Length) -> _Term:
        operand = self.typed(node.this, pa.string())
        binary = pa.types.is_binary(operand.type) or pa.types.is_large_binary(operand.type)
        return self.call(node, pc.binary_length if binary else pc.utf8_length, operand)

    def trim(self, node: exp.Trim) -> _Term:
        if node.args.get("expression") or node.args.get("position"):
            raise self.unsupported(node, "TRIM form (only trim(x) is)")
        return self.call(node, pc.utf8_trim_whitespace, self.typed(node.this, pa.string()))

    def abs_(self, node: exp.Abs) -> _Term:
        return self.call(node, pc.abs_checked, self.typed(node.this))

    def round_(self, node: exp.Round) -> _Term:
        digits = node.args.get("decimals")
        ndigits = 0
        if digits is not None:
            term = self.term(digits)
            if not (isinstance(term, _Literal) and term.kind == "number"):
                raise self.unsupported(node, "ROUND digits (only an integer literal is)")
            try:
                ndigits = int(term.value)
            except ValueError:
                raise self.unsupported(node, "ROUND digits (only an integer literal is)") from None
        operand = self.typed(node.this)
        return self.call(node, pc.round, operand, ndigits, "half_towards_infinity")

    def coalesce(self, node: exp.Coalesce) -> _Term:
        terms = [self.term(n) for n in (node.this, *node.expressions)]
        typed = [t for t in terms if isinstance(t, _Typed)]
        hint = typed[0].type if typed else None
        args = [self.resolve(t, hint) if isinstance(t, _Literal) else t for t in terms]
        return self.call(node, pc.coalesce, *args)


_NODES: dict[type[exp.Expression], Callable[[_Translator, Any], _Term]] = {
    exp.Paren: _Translator.paren,
    exp.Column: _Translator.column,
    exp.Literal: _Translator.literal,
    exp.Boolean: _Translator.boolean,
    exp.Null: _Translator.null,
    exp.Neg: _Translator.neg,
    exp.Not: _Translator.not_,
    exp.And: _Translator.connective,
    exp.Or: _Translator.connective,
    **dict.fromkeys(_COMPARISONS, _Translator.comparison),
    **dict.fromkeys(_ARITHMETIC, _Translator.arithmetic),
    exp.Mod: _Translator.mod,
    exp.DPipe: _Translator.concat,
    exp.Is: _Translator.is_,
    exp.In: _Translator.in_,
    exp.Between: _Translator.between,
    exp.Like: _Translator.like,
    exp.ILike: _Translator.like,
    exp.Escape: _Translator.escape,
    exp.Cast: _Translator.cast,
    exp.TryCast: _Translator.cast,
    exp.Lower: _Translator.lower_upper,
    exp.Upper: _Translator.lower_upper,
    exp.Length: _Translator.length,
    exp.Trim: _Translator.trim,
    exp.Abs: _Translator.abs_,
    exp.Round: _Translator.round_,
    exp.Coalesce: _Translator.coalesce,
}


# ---------------------------------------------------------------------------
# literals
# ---------------------------------------------------------------------------


def _literal_scalar(literal: _Literal, hint: pa.DataType | None) -> pa.Scalar:
    """A SQL literal as an Arrow scalar, typed by the type it meets (``hint``) where exact."""
    kind, value = literal.kind, literal.value
    if kind == "null":
        return pa.scalar(None, hint if hint is not None else pa.null())
    if kind == "bool":
        return pa.scalar(value, pa.bool_())
    if kind == "number":
        return _number_scalar(value, hint)
    if kind == "timestamp" or (hint is not None and pa.types.is_timestamp(hint)):
        return _timestamp_scalar(
            value, hint if hint is not None and pa.types.is_timestamp(hint) else None
        )
    return _string_scalar(value, hint)


def _number_scalar(text: str, hint: pa.DataType | None) -> pa.Scalar:
    integral = re.fullmatch(r"-?\d+", text) is not None
    if hint is not None and pa.types.is_decimal(hint):
        try:
            return pa.scalar(Decimal(text))  # its own precision and scale: exact
        except (InvalidOperation, *_ARROW_ERRORS):
            pass
    if not integral:
        return pa.scalar(float(text), pa.float64())
    number = int(text)
    if hint is not None and pa.types.is_integer(hint) and _fits(number, hint):
        return pa.scalar(number, hint)
    if hint is not None and pa.types.is_floating(hint):
        exact = abs(number) <= (1 << (24 if hint == pa.float32() else 53))
        if exact and not pa.types.is_float16(hint):
            return pa.scalar(float(number), hint)
    if _INT64[0] <= number <= _INT64[1]:
        return pa.scalar(number, pa.int64())
    if 0 <= number <= _UINT64_MAX:
        return pa.scalar(number, pa.uint64())
    raise ValueError(f"integer literal {text} is out of the 64-bit range")


def _fits(number: int, int_type: pa.DataType) -> bool:
    bits = int_type.bit_width
    if pa.types.is_signed_integer(int_type):
        return -(1 << (bits - 1)) <= number < (1 << (bits - 1))
    return 0 <= number < (1 << bits)


def _string_scalar(text: str, hint: pa.DataType | None) -> pa.Scalar:
    if hint is None or pa.types.is_null(hint):
        return pa.scalar(text, pa.string())
    if pa.types.is_string(hint) or pa.types.is_large_string(hint) or pa.types.is_string_view(hint):
        return pa.scalar(text, hint)
    if pa.types.is_binary(hint) or pa.types.is_large_binary(hint):
        return pa.scalar(text.encode(), hint)
    if pa.types.is_date(hint):
        try:
            return pa.scalar(dt.date.fromisoformat(text), hint)
        except ValueError:
            raise ValueError(f"{text!r} is not a date (YYYY-MM-DD)") from None
    if pa.types.is_time(hint):
        try:
            return pa.scalar(dt.time.fromisoformat(text), pa.time64("us")).cast(hint, safe=True)
        except (ValueError, *_ARROW_ERRORS):
            raise ValueError(f"{text!r} is not a time of day (HH:MM:SS[.ffffff])") from None
    if pa.types.is_decimal(hint):
        try:
            return pa.scalar(Decimal(text))
        except (InvalidOperation, *_ARROW_ERRORS):
            raise ValueError(f"{text!r} is not a decimal number") from None
    if pa.types.is_integer(hint) or pa.types.is_floating(hint) or pa.types.is_boolean(hint):
        try:
            return pa.scalar(text).cast(hint, safe=True)
        except _ARROW_ERRORS:
            raise ValueError(f"{text!r} is not a valid {hint}") from None
    return pa.scalar(text, pa.string())  # the operator will say what it cannot compare


_FRACTION = re.compile(r"^(.*?\d{2}:\d{2}:\d{2})\.(\d{7,})(.*)$")


def _timestamp_scalar(text: str, hint: pa.DataType | None) -> pa.Scalar:
    """``text`` (ISO 8601) as a timestamp comparable with ``hint`` (a timestamp type, or None).

    A time without an offset is read in ``hint``'s time zone; a time with an
    offset is an instant, refused for a ``hint`` without a time zone.
    """
    nanos = 0
    base = text.strip()
    match = _FRACTION.match(base)
    if match:  # more digits than Python's microseconds: nanoseconds, exactly
        digits = match.group(2)
        if len(digits) > 9 and int(digits[9:]):
            raise ValueError(f"{text!r} is more precise than nanoseconds")
        nanos = int(digits[:9].ljust(9, "0"))
        base = match.group(1) + match.group(3)
    try:
        parsed = dt.datetime.fromisoformat(base)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a timestamp (YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM])"
        ) from None
    tz = hint.tz if hint is not None else None
    unit = "ns" if nanos or (hint is not None and hint.unit == "ns") else "us"
    if parsed.tzinfo is not None:
        if hint is not None and tz is None:
            raise ValueError(
                f"{text!r} has a time zone offset; the column's {hint} has no time zone"
            )
        scalar = pa.scalar(parsed, pa.timestamp(unit, tz=tz or "UTC"))
    else:
        scalar = pa.scalar(parsed, pa.timestamp(unit))
        if tz is not None:
            try:
                local = pc.assume_timezone(pa.array([scalar]), timezone=tz)
            except _ARROW_ERRORS as exc:
                raise ValueError(f"{text!r} in time zone {tz}: {_first_line(exc)}") from None
            scalar = local[0]
    if nanos:
        scalar = pa.scalar(scalar.cast(pa.int64()).as_py() + nanos, scalar.type)
    return scalar


# ---------------------------------------------------------------------------
# update values
# ---------------------------------------------------------------------------


def _family(t: pa.DataType) -> str:
    for name, test in (
        ("null", pa.types.is_null),
        ("bool", pa.types.is_boolean),
        ("int", pa.types.is_integer),
        ("float", pa.types.is_floating),
        ("decimal", pa.types.is_decimal),
        ("string", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
        ("binary", lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t)),
        ("date", pa.types.is_date),
        ("timestamp", pa.types.is_timestamp),
        ("time", pa.types.is_time),
        ("duration", pa.types.is_duration),
    ):
        if test(t):
            return name
    return str(t)


_SAFE_CASTS = {  # (from family, to family) an expression's value may be cast along
    ("int", "int"),
    ("int", "float"),
    ("int", "decimal"),
    ("float", "float"),
    ("decimal", "decimal"),
    ("decimal", "float"),
    ("string", "string"),
    ("binary", "binary"),
    ("date", "date"),
    ("date", "timestamp"),
    ("time", "time"),
    ("duration", "duration"),
}
_LITERAL_CASTS = {("float", "int"), ("float", "decimal"), ("decimal", "int")}  # checked now


def _assignable(src: pa.DataType, dst: pa.DataType, literal: bool = False) -> bool:
    if src == dst or pa.types.is_null(src):
        return True
    pair = (_family(src), _family(dst))
    if pair == ("timestamp", "timestamp"):
        return (src.tz is None) == (dst.tz is None)
    return pair in _SAFE_CASTS or (literal and pair in _LITERAL_CASTS)


def _widening_cast(term: _Typed, target: pa.DataType) -> pc.Expression:
    """``term`` safely cast to ``target`` (a value that does not fit raises when evaluated)."""
    expr = term.expr
    if pa.types.is_integer(term.type) and pa.types.is_decimal(target) and target.scale <= 18:
        # Arrow wants room for any integer (19 digits) before the point; go through 38
        expr = expr.cast(pa.decimal128(38, target.scale), safe=True)
    return expr.cast(target, safe=True)


def _assign_scalar(scalar: pa.Scalar, target: pa.Field, what: str) -> pa.Scalar:
    """``scalar`` converted exactly to ``target``'s type, or ValueError naming the column."""
    if not scalar.is_valid and not target.nullable:
        raise ValueError(f"column {target.name!r} is not nullable; cannot set it to {what}")
    if scalar.type == target.type:
        return scalar
    if not _assignable(scalar.type, target.type, literal=True):
        raise ValueError(
            f"cannot assign {what} ({scalar.type}) to column {target.name!r} ({target.type})"
        )
    try:
        return scalar.cast(target.type, safe=True)
    except (*_ARROW_ERRORS, OverflowError) as exc:
        raise ValueError(
            f"cannot assign {what} to column {target.name!r} ({target.type}) exactly:"
            f" {_first_line(exc)}"
        ) from None


def _python_scalar(value: Any, target: pa.Field) -> pa.Scalar:
    """A non-string Python value as an Arrow scalar, before conversion to the column's type."""
    if value is None:
        return pa.scalar(None, target.type)
    if isinstance(value, dt.datetime) and pa.types.is_timestamp(target.type):
        if value.tzinfo is None:
            return _timestamp_scalar(value.isoformat(), target.type)
        if target.type.tz is None:
            raise ValueError(
                f"cannot assign {value!r} (with a time zone) to column {target.name!r}"
                f" ({target.type}, without one)"
            )
    if (
        isinstance(value, dt.date)
        and not isinstance(value, dt.datetime)
        and pa.types.is_timestamp(target.type)
    ):  # midnight, in the column's time zone
        return _timestamp_scalar(value.isoformat(), target.type)
    if pa.types.is_decimal(target.type) and isinstance(value, int | float):
        if isinstance(value, bool):
            raise ValueError(f"cannot assign {value!r} to column {target.name!r} ({target.type})")
        value = Decimal(repr(value) if isinstance(value, float) else value)  # shortest digits
    if isinstance(value, bytearray | memoryview):
        value = bytes(value)
    nested = pa.types.is_nested(target.type)  # a list or dict: Arrow needs the type
    try:
        return pa.scalar(value, target.type) if nested else pa.scalar(value)
    except (*_ARROW_ERRORS, OverflowError) as exc:
        raise ValueError(
            f"cannot assign {value!r} to column {target.name!r} ({target.type}): {_first_line(exc)}"
        ) from None


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _check_expression(expression: pc.Expression, schema: pa.Schema) -> pc.Expression:
    """A user's ``pc.Expression``, bound against ``schema`` to check it names real columns."""
    try:
        scanner = ds.dataset(schema.empty_table()).scanner(columns={"value": expression})
    except _ARROW_ERRORS as exc:
        message = _first_line(exc)
        missing = _FIELD_REF.search(message)
        if missing:
            raise ValueError(
                f"where {expression} refers to unknown column {missing.group(1)!r};"
                f" the table's columns are: {', '.join(schema.names) or '(none)'}"
            ) from None
        raise ValueError(f"invalid where {expression}: {message}") from None
    result = scanner.projected_schema.field("value").type
    if not (pa.types.is_boolean(result) or pa.types.is_null(result)):
        raise ValueError(f"where {expression} is not a boolean expression (its type is {result})")
    return expression


def _sql_cast(target: pa.DataType) -> pc.CastOptions:
    """SQL's CAST: a fraction is truncated toward zero; an overflow or a bad string raises."""
    return pc.CastOptions(
        target, allow_decimal_truncate=True, allow_float_truncate=True, allow_time_truncate=True
    )


def _backslash_escapes(pattern: str, escape: str) -> str:
    """A LIKE pattern with escape character ``escape`` rewritten for Arrow's backslash."""
    out: list[str] = []
    chars = iter(pattern)
    for c in chars:
        if c == escape:
            nxt = next(chars, "")
            out.append("\\" + nxt if nxt else "\\\\")
        elif c == "\\":
            out.append("\\\\")
        else:
            out.append(c)
    return "".join(out)


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


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
