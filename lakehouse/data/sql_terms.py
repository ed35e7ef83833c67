"""The single-column facts of a SQL ``where``: :class:`lakehouse.terms.Term` s.

A ``where`` is translated to an Arrow expression (:mod:`lakehouse.data.sql`);
this module reads the same sqlglot tree once more for what pruning needs:
the conjuncts of its top-level ``AND`` chain that say something about one
column alone::

    id = 5 AND day >= '2024-01-01' AND (kind = 'a' OR kind IN ('b', 'c')) AND x + 1 > 2
    ------     -------------------      ------------------------------       ---------
    id = 5     day >= 2024-01-01        kind in (a, b, c)                    (no term)

One conjunct gives terms when it is, after parentheses:

* ``col op constant`` either way round (``5 < id`` is ``id > 5``), op one of
  ``= < <= > >=`` (``!=`` never: a NaN satisfies it and no bound holds NaN);
* ``col BETWEEN a AND b`` (two terms);
* ``col IN (constants)`` (NULLs in the list dropped: they never make a row match);
* ``col IS NULL`` / ``col IS NOT NULL``;
* an ``OR`` of equalities and ``IN`` lists on one column (one ``in`` term).

A constant is typed exactly as the translator types it for that column, and
its term value is that scalar's ``as_py()``. No term is made (and the
predicate is not *exact*) when the value could mislead a bound comparison
done in Python: a null, a NaN, a value whose Python form loses precision
(nanoseconds), or a type that Arrow would compare through a conversion
Python does not make (an int column against a float, a date against a
timestamp, signed against unsigned). ``exact`` is True when every conjunct
became terms that say all it says, so the terms alone decide which files
pruning can skip.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
from sqlglot import exp

from lakehouse.data.literals import ARROW_ERRORS, Literal, Typed
from lakehouse.data.sql_nodes import Translator
from lakehouse.terms import Op, Term

__all__ = ["where_terms"]

_OPS: dict[type[exp.Expression], Op] = {
    exp.EQ: "=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
_FLIPPED: dict[Op, Op] = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class _NoTerm(Exception):
    """This conjunct (or this constant) gives no term."""


def where_terms(t: Translator, tree: exp.Expression) -> tuple[tuple[Term, ...], bool]:
    """``(terms, exact)`` of a ``where`` already translated by ``t`` (see the module doc)."""
    terms: list[Term] = []
    exact = True
    for conjunct in _conjuncts(tree):
        try:
            terms.extend(_terms(t, conjunct))
        except _NoTerm:
            exact = False
        except (*ARROW_ERRORS, ValueError, TypeError, OverflowError):
            exact = False  # whatever the translator accepted but we cannot read
    return tuple(terms), exact


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    """The operands of the top-level AND chain (through parentheses), in order."""
    out: list[exp.Expression] = []
    todo = [node]
    while todo:
        n = _unparen(todo.pop())
        if isinstance(n, exp.And):
            todo.extend(reversed([n.this, n.expression]))
        else:
            out.append(n)
    return out


def _unparen(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _terms(t: Translator, node: exp.Expression) -> list[Term]:
    if type(node) in _OPS:
        left, right = _unparen(node.this), _unparen(node.expression)
        op = _OPS[type(node)]
        if isinstance(right, exp.Column) and not isinstance(left, exp.Column):
            left, right, op = right, left, _FLIPPED[op]
        name, typ = _column(t, left)
        return [Term(name, op, (_value(t, right, typ),))]
    if isinstance(node, exp.Between):
        if node.args.get("negate") or node.args.get("symmetric"):
            raise _NoTerm
        name, typ = _column(t, _unparen(node.this))
        low, high = (_value(t, node.args[k], typ) for k in ("low", "high"))
        return [Term(name, ">=", (low,)), Term(name, "<=", (high,))]
    if isinstance(node, exp.In):
        name, values = _in_list(t, node)
        return [Term(name, "in", values)]
    if isinstance(node, exp.Is) or (isinstance(node, exp.Not) and isinstance(node.this, exp.Is)):
        negate = isinstance(node, exp.Not)
        is_ = node.this if isinstance(node, exp.Not) else node
        if not isinstance(is_.expression, exp.Null):
            raise _NoTerm
        negate ^= bool(is_.args.get("negate"))
        name, _ = _column(t, _unparen(is_.this))
        return [Term(name, "not_null" if negate else "is_null")]
    if isinstance(node, exp.Or):
        return [_or_term(t, node)]
    raise _NoTerm


def _or_term(t: Translator, node: exp.Or) -> Term:
    """``a = 1 OR a IN (2, 3) OR a = 4`` as ``a in (1, 2, 3, 4)``."""
    name: str | None = None
    values: dict[Any, None] = {}  # in order, once each
    todo: list[exp.Expression] = [node]
    while todo:
        n = _unparen(todo.pop())
        if isinstance(n, exp.Or):
            todo.extend([n.expression, n.this])
            continue
        if isinstance(n, exp.EQ):
            left, right = _unparen(n.this), _unparen(n.expression)
            if isinstance(right, exp.Column) and not isinstance(left, exp.Column):
                left, right = right, left
            col, typ = _column(t, left)
            found: tuple[Any, ...] = (_value(t, right, typ),)
        elif isinstance(n, exp.In):
            col, found = _in_list(t, n)
        else:
            raise _NoTerm
        if name is not None and col != name:
            raise _NoTerm
        name = col
        values.update(dict.fromkeys(found))
    assert name is not None
    return Term(name, "in", tuple(values))


def _in_list(t: Translator, node: exp.In) -> tuple[str, tuple[Any, ...]]:
    if node.args.get("negate") or any(node.args.get(k) for k in ("query", "unnest", "field")):
        raise _NoTerm
    name, typ = _column(t, _unparen(node.this))
    values: dict[Any, None] = {}  # in order, once each
    for item in node.expressions:
        try:
            v = _value(t, item, typ)
        except _Null:
            continue  # x IN (1, NULL) matches the rows where x = 1
        values[v] = None
    if not values:
        raise _NoTerm  # x IN (NULL) matches nothing: no term needed to say so
    return name, tuple(values)


def _column(t: Translator, node: exp.Expression) -> tuple[str, pa.DataType]:
    """The schema column ``node`` names, and its type (``_NoTerm`` for anything else)."""
    if not isinstance(node, exp.Column) or node.table or not isinstance(node.this, exp.Identifier):
        raise _NoTerm
    name = t.column_name(node.this.this, node.this.quoted)
    return name, t.schema.field(name).type


class _Null(_NoTerm):
    """The constant is NULL."""


def _value(t: Translator, node: exp.Expression, column: pa.DataType) -> Any:
    """The constant ``node`` as the translator types it next to ``column``, as Python."""
    node = _unparen(node)
    if node.find(exp.Column) is not None:
        raise _NoTerm
    term = t.term(node)
    if isinstance(term, Literal):
        scalar = t.scalar(term, column)
    else:
        scalar = _evaluate(term)
    if not scalar.is_valid:
        raise _Null
    if not comparable(column, scalar.type):
        raise _NoTerm
    value = scalar.as_py()
    if isinstance(value, float) and math.isnan(value):
        raise _NoTerm  # Arrow's comparisons with NaN differ from Python's
    if not pa.scalar(value, scalar.type).equals(scalar):
        raise _NoTerm  # its Python form lost something (nanoseconds)
    return value


def _evaluate(term: Typed) -> pa.Scalar:
    """The value of a constant expression (``DATE '...'``, ``CAST(...)``, ``-x``),
    computed over one row by Acero (a third of what a dataset scan costs)."""
    from pyarrow import acero

    one = pa.table({"_": pa.array([0], pa.int8())})
    plan = acero.Declaration.from_sequence(
        [
            acero.Declaration("table_source", acero.TableSourceNodeOptions(one)),
            acero.Declaration("project", acero.ProjectNodeOptions([term.expr], ["v"])),
        ]
    )
    return plan.to_table().column(0)[0]


def comparable(column: pa.DataType, value: pa.DataType) -> bool:
    """Whether Arrow compares ``column`` with ``value`` as Python compares their
    ``as_py()`` values (the same kind of value, no lossy conversion)."""
    if column == value:
        return not pa.types.is_float16(column)
    for same_kind in (
        lambda x: pa.types.is_signed_integer(x),
        lambda x: pa.types.is_unsigned_integer(x),
        lambda x: pa.types.is_floating(x) and not pa.types.is_float16(x),
        pa.types.is_decimal,
        lambda x: pa.types.is_string(x) or pa.types.is_large_string(x),
        lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x),
        pa.types.is_date,
        pa.types.is_time,
    ):
        if same_kind(column) and same_kind(value):
            return True
    if pa.types.is_timestamp(column) and pa.types.is_timestamp(value):
        return (column.tz is None) == (value.tz is None)
    return False
