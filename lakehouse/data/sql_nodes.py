"""The translation rules: one function per sqlglot node type, in :data:`NODES`.

Each rule takes the translator (:class:`Translator` here: the members of
:class:`lakehouse.data.sql.Translator` the rules use, so this module need not
import the one that imports it) and one node, and
returns a term (:mod:`lakehouse.data.literals`): a ``Typed`` Arrow expression,
or a ``Literal`` still waiting for a type. A rule translates its children
through the translator (``t.term``, ``t.typed``, ``t.pair``) and builds its
own Arrow call with ``t.call``, which checks the result's type at once::

    a BETWEEN 1 AND 10   ->  between(t, node)
                               value = t.typed(a)             Typed(a, int32)
                               low   = t.typed(1, int32)      the literal meets a's type
                               high  = t.typed(10, int32)
                               t.call(and_kleene, t.call(>=, ...), t.call(<=, ...))

SQL's null semantics are kept by choosing Arrow's Kleene kernels (``AND``,
``OR``) and by spelling out what Arrow does differently (``IN`` with a null
in the list, ``IS TRUE``, ``%`` with the sign of the dividend). A node type
missing from :data:`NODES` is refused by the translator, never guessed at.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from lakehouse.data.literals import ARROW_ERRORS, Literal, Term, Typed, sql_cast


class Translator(Protocol):
    """What a rule may ask of :class:`lakehouse.data.sql.Translator`."""

    #: the predicate's text, shortened and quoted for messages
    quoted: str
    schema: pa.Schema
    #: the columns the predicate reads (rules add to it)
    columns: set[str]

    def term(self, node: exp.Expression) -> Term: ...
    def typed(self, node: exp.Expression, hint: pa.DataType | None = None) -> Typed: ...
    def pair(self, left: exp.Expression, right: exp.Expression) -> tuple[Typed, Typed]: ...
    def resolve(self, literal: Literal, hint: pa.DataType | None) -> Typed: ...
    def scalar(self, literal: Literal, hint: pa.DataType | None) -> pa.Scalar: ...
    def call(
        self, node: exp.Expression, fn: Callable[..., pc.Expression], *args: Any, **kw: Any
    ) -> Typed: ...
    def type_of(self, expr: pc.Expression, what: str) -> pa.DataType: ...
    def column_name(self, name: str, quoted: bool) -> str: ...
    def quote(self, node: exp.Expression) -> str: ...
    def unsupported(self, node: exp.Expression, what: str | None = None) -> ValueError: ...
    def failed(self, what: str, exc: BaseException) -> ValueError: ...


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


# -- leaves ------------------------------------------------------------------


def paren(t: Translator, node: exp.Paren) -> Term:
    return t.term(node.this)


def column(t: Translator, node: exp.Column) -> Term:
    if node.table or not isinstance(node.this, exp.Identifier):
        raise t.unsupported(node, "column reference")
    name = t.column_name(node.this.this, node.this.quoted)
    t.columns.add(name)
    return Typed(pc.field(name), t.schema.field(name).type)


def literal(t: Translator, node: exp.Literal) -> Term:
    return Literal("string" if node.is_string else "number", node.this)


def boolean(t: Translator, node: exp.Boolean) -> Term:
    return Literal("bool", bool(node.this))


def null(t: Translator, node: exp.Null) -> Term:
    return Literal("null", None)


# -- operators ---------------------------------------------------------------


def neg(t: Translator, node: exp.Neg) -> Term:
    inner = t.term(node.this)
    if isinstance(inner, Literal) and inner.kind == "number":
        text = inner.value
        return Literal("number", text[1:] if text.startswith("-") else "-" + text)
    if isinstance(inner, Literal):
        inner = t.resolve(inner, None)
    return t.call(node, pc.negate_checked, inner)


def not_(t: Translator, node: exp.Not) -> Term:
    return t.call(node, pc.invert, _boolean(t, node.this))


def _boolean(t: Translator, node: exp.Expression) -> Typed:
    operand = t.typed(node, pa.bool_())
    if pa.types.is_null(operand.type):
        return Typed(operand.expr.cast(pa.bool_()), pa.bool_())
    if not pa.types.is_boolean(operand.type):
        raise ValueError(f"{t.quote(node)} is not a boolean ({operand.type}) in {t.quoted}")
    return operand


def connective(t: Translator, node: exp.And | exp.Or) -> Term:
    """A chain ``a AND b AND c`` flattened, so a long one does not recurse deeply."""
    fn = pc.and_kleene if isinstance(node, exp.And) else pc.or_kleene
    operands = [_boolean(t, o) for o in node.flatten() if isinstance(o, exp.Expression)]
    result = operands[0].expr
    for operand in operands[1:]:  # booleans, so no need to type each step
        result = fn(result, operand.expr)
    return Typed(result, pa.bool_())


def comparison(t: Translator, node: exp.Expression) -> Term:
    a, b = t.pair(node.this, node.expression)
    return t.call(node, _COMPARISONS[type(node)], a, b)


def arithmetic(t: Translator, node: exp.Expression) -> Term:
    a, b = t.pair(node.this, node.expression)
    return t.call(node, _ARITHMETIC[type(node)], a, b)


def mod(t: Translator, node: exp.Mod) -> Term:
    """``a % b`` as ``a - trunc(a / b) * b``: the remainder has the sign of ``a``."""
    a, b = t.pair(node.this, node.expression)
    quotient = t.call(node, pc.divide_checked, a, b)
    if not pa.types.is_integer(quotient.type):  # integer division already truncates
        quotient = t.call(node, pc.trunc, quotient)
    product = t.call(node, pc.multiply_checked, quotient, b)
    return t.call(node, pc.subtract_checked, a, product)


def concat(t: Translator, node: exp.DPipe) -> Term:
    a, b = t.pair(node.this, node.expression)
    separator = pa.scalar("", a.type if pa.types.is_large_string(a.type) else pa.string())
    return t.call(node, pc.binary_join_element_wise, a, b, pc.scalar(separator))


def is_(t: Translator, node: exp.Is) -> Term:
    operand = t.typed(node.this)
    right = node.expression
    if isinstance(right, exp.Null):
        result = t.call(node, pc.is_null, operand)
    elif isinstance(right, exp.Boolean):
        equal = t.call(node, pc.equal, operand, pc.scalar(bool(right.this)))
        result = t.call(node, pc.coalesce, equal, pc.scalar(False))
    else:
        raise t.unsupported(node, "IS test")
    return t.call(node, pc.invert, result) if node.args.get("negate") else result


def in_(t: Translator, node: exp.In) -> Term:
    if any(node.args.get(k) for k in ("query", "unnest", "field")) or not node.expressions:
        raise t.unsupported(node, "IN (only a list of values is)")
    value = t.typed(node.this)
    items = [t.term(item) for item in node.expressions]
    value_set = _value_set(t, items, value.type)
    result: Typed | None = None
    if value_set is not None:  # all literals of the value's type: one hash lookup
        found = t.call(node, pc.is_in, value, value_set=value_set, skip_nulls=True)
        null_bool = pc.scalar(pa.scalar(None, pa.bool_()))
        # SQL: NULL IN (...) is null, and so is a miss when the list holds a NULL.
        # Written as `found OR (value IS NULL AND NULL)`, not as an if_else, so
        # that pruning files by column bounds still sees the is_in.
        if len(value_set) < len(items):
            unknown = Typed(null_bool, pa.bool_())
        else:
            unknown = t.call(node, pc.and_kleene, t.call(node, pc.is_null, value), null_bool)
        result = t.call(node, pc.or_kleene, found, unknown)
    else:
        for item in items:
            other = t.resolve(item, value.type) if isinstance(item, Literal) else item
            equal = t.call(node, pc.equal, value, other)
            result = equal if result is None else t.call(node, pc.or_kleene, result, equal)
    assert result is not None
    return t.call(node, pc.invert, result) if node.args.get("negate") else result


def _value_set(t: Translator, items: list[Term], value_type: pa.DataType) -> pa.Array | None:
    """The non-null items as an array of ``value_type``, if all are literals that fit it."""
    values = []
    for item in items:
        if not isinstance(item, Literal):
            return None
        scalar = t.scalar(item, value_type)
        if not scalar.is_valid:
            continue
        if scalar.type != value_type:
            try:
                scalar = scalar.cast(value_type, safe=True)
            except (*ARROW_ERRORS, OverflowError):
                return None  # compared one by one, with Arrow's type promotion
        values.append(scalar)
    try:
        return pa.array(values, value_type)
    except (*ARROW_ERRORS, OverflowError):
        return None


def between(t: Translator, node: exp.Between) -> Term:
    if node.args.get("symmetric"):
        raise t.unsupported(node, "BETWEEN SYMMETRIC")
    value = t.typed(node.this)
    low, high = (t.typed(node.args[k], value.type) for k in ("low", "high"))
    result = t.call(
        node,
        pc.and_kleene,
        t.call(node, pc.greater_equal, value, low),
        t.call(node, pc.less_equal, value, high),
    )
    return t.call(node, pc.invert, result) if node.args.get("negate") else result


def like(t: Translator, node: exp.Like | exp.ILike, escape: str | None = None) -> Term:
    value = t.typed(node.this, pa.string())
    pattern = node.expression
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise t.unsupported(node, "LIKE pattern (only a string literal is)")
    text = pattern.this if escape is None else _backslash_escapes(pattern.this, escape)
    result = t.call(
        node, pc.match_like, value, pattern=text, ignore_case=isinstance(node, exp.ILike)
    )
    return t.call(node, pc.invert, result) if node.args.get("negate") else result


def escape(t: Translator, node: exp.Escape) -> Term:
    inner, char = node.this, node.expression
    if not isinstance(inner, exp.Like | exp.ILike):
        raise t.unsupported(node, "ESCAPE (only after LIKE is)")
    if not (isinstance(char, exp.Literal) and char.is_string and len(char.this) == 1):
        raise t.unsupported(node, "ESCAPE (one character is)")
    return like(t, inner, char.this)


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


# -- CAST and functions ------------------------------------------------------


def cast(t: Translator, node: exp.Cast) -> Term:
    if isinstance(node, exp.TryCast):
        raise t.unsupported(node, "TRY_CAST")
    target = _arrow_type(t, node.args["to"], node)
    operand = t.term(node.this)
    if isinstance(operand, Literal):
        if operand.kind == "string" and target == pa.timestamp("us"):
            return Literal("timestamp", operand.value)  # takes the time zone it meets
        scalar = t.scalar(operand, target)
        if scalar.type != target:
            try:
                scalar = scalar.cast(options=sql_cast(target))
            except (*ARROW_ERRORS, OverflowError) as exc:
                raise t.failed(t.quote(node), exc) from None
        return Typed(pc.scalar(scalar), scalar.type)
    expr = operand.expr.cast(options=sql_cast(target))
    return Typed(expr, t.type_of(expr, t.quote(node)))


def _arrow_type(t: Translator, datatype: exp.DataType, node: exp.Expression) -> pa.DataType:
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
        except (ValueError, AttributeError, *ARROW_ERRORS):
            raise t.unsupported(node, "DECIMAL parameters") from None
    if kind in _SQL_TYPES and (not datatype.expressions or kind in _SIZED_TYPES):
        return _SQL_TYPES[kind]
    raise t.unsupported(node, f"CAST type {datatype.sql()}")


def lower_upper(t: Translator, node: exp.Lower | exp.Upper) -> Term:
    fn = pc.utf8_lower if isinstance(node, exp.Lower) else pc.utf8_upper
    return t.call(node, fn, t.typed(node.this, pa.string()))


def length(t: Translator, node: exp.Length) -> Term:
    operand = t.typed(node.this, pa.string())
    binary = pa.types.is_binary(operand.type) or pa.types.is_large_binary(operand.type)
    return t.call(node, pc.binary_length if binary else pc.utf8_length, operand)


def trim(t: Translator, node: exp.Trim) -> Term:
    if node.args.get("expression") or node.args.get("position"):
        raise t.unsupported(node, "TRIM form (only trim(x) is)")
    return t.call(node, pc.utf8_trim_whitespace, t.typed(node.this, pa.string()))


def abs_(t: Translator, node: exp.Abs) -> Term:
    return t.call(node, pc.abs_checked, t.typed(node.this))


def round_(t: Translator, node: exp.Round) -> Term:
    digits = node.args.get("decimals")
    ndigits = 0
    if digits is not None:
        term = t.term(digits)
        if not (isinstance(term, Literal) and term.kind == "number"):
            raise t.unsupported(node, "ROUND digits (only an integer literal is)")
        try:
            ndigits = int(term.value)
        except ValueError:
            raise t.unsupported(node, "ROUND digits (only an integer literal is)") from None
    operand = t.typed(node.this)
    return t.call(node, pc.round, operand, ndigits, "half_towards_infinity")


def coalesce(t: Translator, node: exp.Coalesce) -> Term:
    terms = [t.term(n) for n in (node.this, *node.expressions)]
    typed = [term for term in terms if isinstance(term, Typed)]
    hint = typed[0].type if typed else None
    args = [t.resolve(term, hint) if isinstance(term, Literal) else term for term in terms]
    return t.call(node, pc.coalesce, *args)


NODES: dict[type[exp.Expression], Callable[[Translator, Any], Term]] = {
    exp.Paren: paren,
    exp.Column: column,
    exp.Literal: literal,
    exp.Boolean: boolean,
    exp.Null: null,
    exp.Neg: neg,
    exp.Not: not_,
    exp.And: connective,
    exp.Or: connective,
    **dict.fromkeys(_COMPARISONS, comparison),
    **dict.fromkeys(_ARITHMETIC, arithmetic),
    exp.Mod: mod,
    exp.DPipe: concat,
    exp.Is: is_,
    exp.In: in_,
    exp.Between: between,
    exp.Like: like,
    exp.ILike: like,
    exp.Escape: escape,
    exp.Cast: cast,
    exp.TryCast: cast,
    exp.Lower: lower_upper,
    exp.Upper: lower_upper,
    exp.Length: length,
    exp.Trim: trim,
    exp.Abs: abs_,
    exp.Round: round_,
    exp.Coalesce: coalesce,
}
"""The rule for each supported sqlglot node type (exact type: a subclass has its own entry)."""
