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
        |  sql.Translator: names checked against the schema, literals typed,
        v  every node's Arrow type known (so errors name the SQL that failed)
    ((status == "open") and (total > 100))       (and_kleene; 100 a decimal128(3, 0))

sqlglot does the parsing; :mod:`lakehouse.data.sql` only translates its
tree, node by node (the rules are in :mod:`lakehouse.data.sql_nodes`), into
Arrow compute calls. A node it does not know (a subquery, an alias, ``CASE``,
an unknown function) is refused with a ``ValueError`` that names it, never
guessed at. This module is the public face: it turns the translation into a
:class:`Predicate` or an ``update`` value and evaluates them over rows.

Literals take their type from what they meet. ``100`` alone is an int64, but
compared with (or added to) a ``decimal128(10, 2)`` column it becomes an
exact decimal, next to an int32 column an int32, and ``'2024-01-02'``
compared with a ``date32`` column is a date, with a
``timestamp[us, tz=UTC]`` column a timestamp (a time without an offset is
read in the column's time zone; one with an offset is an instant, refused
for a column without a time zone). ``TIMESTAMP '...'`` behaves the same;
``DATE '...'`` and ``CAST(... AS type)`` fix their type. A literal that
cannot be read exactly as the type it meets (``'2024-13-01'`` for a date,
``'abc'`` for an int) raises ``ValueError``. Those rules, and which values
``update`` may assign to which columns, are in :mod:`lakehouse.data.literals`.

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

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakehouse.data.literals import (
    ARROW_ERRORS,
    Literal,
    Typed,
    assign_scalar,
    assignable,
    first_line,
    python_scalar,
    widening_cast,
)
from lakehouse.data.rows import plain_type, value_scanner
from lakehouse.terms import Term

__all__ = ["Predicate", "evaluate", "matches", "parse_value", "parse_where", "where_failed"]

_FIELD_REF = re.compile(r"FieldRef\.Name\((.*?)\)")


@dataclass(frozen=True, eq=False)  # compared by identity: Expression == builds an Expression
class Predicate:
    """A parsed ``where``: a boolean row filter over a table's columns."""

    expression: pc.Expression
    """Boolean (null counts as not matching, see :func:`matches`)."""
    columns: frozenset[str] | None
    """The columns the filter reads; None when unknown (a ``pc.Expression`` given by the user)."""
    text: str
    """The SQL text as given, or ``str(expression)``."""
    terms: tuple[Term, ...] = ()
    """Single-column facts every matching row satisfies (:mod:`lakehouse.terms`), from
    the top-level ``AND`` chain of SQL text; () for a ``pc.Expression``."""
    exact: bool = False
    """True when ``terms`` say all the predicate says (``id = 5 AND day >= '2024-01-01'``):
    pruning by them skips every file the whole predicate could skip."""

    def row_mask(self, table: pa.Table | pa.RecordBatch) -> pa.Array | None:
        """An exact row test that replaces evaluating :attr:`expression` (which is then
        a superset, good for pruning only); None for a plain predicate."""
        return None


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
        return Predicate(_check_expression(where, schema), None, _text(where))
    if not isinstance(where, str):
        raise TypeError(
            "where must be a SQL string or a pyarrow.compute.Expression,"
            f" not {type(where).__name__}"
        )
    if not where.strip():
        raise ValueError('where is an empty SQL expression; give a condition, such as "id = 1"')
    from lakehouse.data.sql import Translator  # sqlglot loads on first use
    from lakehouse.data.sql_terms import where_terms

    translator = Translator(where, schema)
    tree = translator.parse()
    result = translator.typed(tree, pa.bool_())
    if not (pa.types.is_boolean(result.type) or pa.types.is_null(result.type)):
        raise ValueError(
            f"where {translator.quoted} is not a boolean expression (its type is {result.type})"
        )
    terms, exact = where_terms(translator, tree)
    return Predicate(result.expr, frozenset(translator.columns), where, terms, exact)


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
    target = target.with_type(plain_type(target.type))  # view types: see evaluate
    if isinstance(value, str):
        from lakehouse.data.sql import Translator

        translator = Translator(value, schema)
        try:
            term = translator.term(translator.parse())
        except ValueError as exc:
            raise ValueError(f"value for column {name!r}: {exc}") from None
        if isinstance(term, Literal):
            try:
                scalar = translator.scalar(term, target.type)
                return pc.scalar(assign_scalar(scalar, target, translator.quoted)), frozenset()
            except ValueError as exc:
                if repr(name) in str(exc) and not isinstance(exc, pa.ArrowException):
                    raise
                raise ValueError(f"value for column {name!r}: {exc}") from None
        if term.type != target.type:
            if not assignable(term.type, target.type):
                raise ValueError(
                    f"cannot assign {translator.quoted} ({term.type}) to column {name!r}"
                    f" ({target.type}): the cast is not safe"
                )
            cast = widening_cast(term, target.type)
            translator.type_of(cast, f"the cast to column {name!r} ({target.type})")
            term = Typed(cast, target.type)
        return term.expr, frozenset(translator.columns)
    scalar = python_scalar(value, target)
    return pc.scalar(assign_scalar(scalar, target, repr(value))), frozenset()


def evaluate(table: pa.Table | pa.RecordBatch, expression: pc.Expression) -> pa.ChunkedArray:
    """``expression`` computed over every row of ``table``, in row order.

    Errors of the computation (an overflow, a division by zero, a value a
    safe cast cannot convert) raise ``pyarrow.ArrowInvalid``, a ValueError.

    Arrow has no compute kernels for view types, so ``table``'s view columns are
    read as their large non-view types (:func:`lakehouse.data.rows.value_scanner`),
    the types :func:`parse_where` and :func:`parse_value` translate against.
    """
    return value_scanner(table, expression).to_table().column("value")


def matches(table: pa.Table | pa.RecordBatch, predicate: Predicate) -> pa.Array:
    """A boolean mask of ``table``'s rows that satisfy ``predicate``; null counts as False.

    A computation that fails on the rows (a division by zero, a cast a value
    cannot take) raises :class:`ValueError` naming the ``where``."""
    exact = predicate.row_mask(table)
    if exact is not None:
        return exact
    try:
        mask = evaluate(table, predicate.expression)
    except ARROW_ERRORS as exc:
        raise where_failed(predicate, exc) from None
    if not pa.types.is_boolean(mask.type):
        mask = mask.cast(pa.bool_())
    return pc.fill_null(mask, False).combine_chunks()


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def where_failed(predicate: Predicate, exc: BaseException) -> ValueError:
    """The error of a ``where`` whose computation failed on the rows (Arrow's error
    is a dependency's class, never raised to callers as is)."""
    return ValueError(f"where {predicate.text!r} failed on the table's rows: {first_line(exc)}")


def _text(expression: pc.Expression) -> str:
    """``str(expression)``; Arrow can cut a long string literal inside a UTF-8 character."""
    try:
        return str(expression)
    except UnicodeDecodeError:
        return "(a pyarrow expression with a long string literal)"


def _check_expression(expression: pc.Expression, schema: pa.Schema) -> pc.Expression:
    """A user's ``pc.Expression``, bound against ``schema`` to check it names real columns."""
    try:
        scanner = value_scanner(schema.empty_table(), expression)  # as evaluate sees the rows
    except ARROW_ERRORS as exc:
        message = first_line(exc)
        missing = _FIELD_REF.search(message)
        if missing:
            raise ValueError(
                f"where {_text(expression)} refers to unknown column {missing.group(1)!r};"
                f" the table's columns are: {', '.join(schema.names) or '(none)'}"
            ) from None
        raise ValueError(f"invalid where {_text(expression)}: {message}") from None
    result = scanner.projected_schema.field("value").type
    if not (pa.types.is_boolean(result) or pa.types.is_null(result)):
        raise ValueError(
            f"where {_text(expression)} is not a boolean expression (its type is {result})"
        )
    return expression
