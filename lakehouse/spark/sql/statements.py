"""Statements of a SQL text: :func:`split` parses them, :func:`run` runs one.

Runs on the driver. :func:`split` parses the whole text with sqlglot's Spark
dialect before anything runs (a syntax error anywhere: ValueError, nothing
run), keeping each statement's original text (``tree.meta["sql"]``). :func:`run`
dispatches on the node type to the handlers of the sibling modules, imported
when first needed:

=====================================  =========================================
statement                              handler
=====================================  =========================================
``SELECT``, ``VALUES``, set ops, CTEs  :func:`query.frame_of` (Spark runs it)
``INSERT``, ``DELETE``, ``UPDATE``     :mod:`dml`
``MERGE INTO``                         :mod:`merge`
``CREATE``, ``DROP``, ``ALTER``        :mod:`ddl`
``SHOW``, ``DESCRIBE``, ``CALL``       :mod:`catalog`
``EXPLAIN [mode] <query>``             Spark's ``EXPLAIN`` of the rewritten query
``BEGIN``, ``COMMIT``, ``ROLLBACK``    :class:`~lakehouse.spark.sql.session.SqlSession`
anything else                          ``spark.sql`` with the original text,
                                       when it names no lakehouse object
=====================================  =========================================
"""

from __future__ import annotations

import logging
import re
from typing import Any

import sqlglot
from pyspark.sql import DataFrame
from sqlglot import exp
from sqlglot.dialects.spark import Spark

from lakehouse.spark.sql.context import Context, original, to_spark
from lakehouse.spark.sql.names import table_name, unsupported
from lakehouse.spark.sqltext import canonical

__all__ = ["QUERIES", "TRANSACTIONS", "original", "run", "split", "to_spark"]

QUERIES = (exp.Select, exp.SetOperation, exp.Values, exp.Subquery)
TRANSACTIONS = (exp.Transaction, exp.Commit, exp.Rollback)

_START = re.compile(r"\s*START\s+TRANSACTION\b(.*)\Z", re.IGNORECASE | re.DOTALL)
_END = re.compile(r"\s*END(\s+(TRANSACTION|WORK))?\s*\Z", re.IGNORECASE)


class _NoCommandFallbackWarning(logging.Filter):
    """sqlglot warns when it parses a statement (``SHOW``, ``CALL``) as a Command;
    those are expected here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


logging.getLogger("sqlglot").addFilter(_NoCommandFallbackWarning())


def split(text: str) -> list[exp.Expression]:
    """Every statement of ``text`` (``;``-separated), parsed; each tree's
    ``meta["sql"]`` is its original text. ValueError for a syntax error in any
    of them (nothing is run by this), or for a text holding no statement."""
    if not isinstance(text, str):
        raise TypeError(f"SQL text must be a str, not {type(text).__name__}")
    dialect = Spark()
    try:
        tokens = dialect.tokenize(text)
    except sqlglot.errors.SqlglotError as exc:
        raise ValueError(f"SQL syntax error: {exc}") from None
    # 'it''s' is one literal to Spark, two to sqlglot: respelled 'it\'s' (same
    # length, so the token positions hold)
    readable = canonical(text) or text
    pieces: list[tuple[str, str]] = []
    start = 0
    for tok in tokens:
        if tok.token_type.name == "SEMICOLON":
            pieces.append((text[start : tok.start], readable[start : tok.start]))
            start = tok.end + 1
    pieces.append((text[start:], readable[start:]))
    trees: list[exp.Expression] = []
    for i, (piece, parsed) in enumerate(pieces):
        try:
            tree = _parse(parsed, dialect)
        except ValueError as exc:
            if len(pieces) > 1:
                raise ValueError(f"statement {i + 1}: {exc}") from None
            raise
        if tree is not None:
            tree.meta["sql"] = piece.strip()
            trees.append(tree)
    if not trees:
        raise ValueError("no SQL statement in the text")
    return trees


def _parse(piece: str, dialect: Any) -> exp.Expression | None:
    if not piece.strip():
        return None
    start = _START.match(piece)  # sqlglot reads START TRANSACTION as a column alias
    if start:
        piece = "BEGIN TRANSACTION" + start.group(1)
    elif _END.match(piece):  # END [TRANSACTION]: Postgres' spelling of COMMIT
        return exp.Commit()
    try:
        tree = sqlglot.parse_one(piece, read=dialect)
    except sqlglot.errors.ParseError as exc:
        if "No expression was parsed" in str(exc):  # comments only
            return None
        raise ValueError(f"SQL syntax error: {_first_error(exc)}") from None
    except sqlglot.errors.SqlglotError as exc:
        raise ValueError(f"SQL syntax error: {exc}") from None
    if not isinstance(tree, exp.Expression):
        raise ValueError(f"SQL syntax error: not a statement: {piece.strip()!r}")
    return tree


_TOKEN = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: .*?>")


def _token(m: re.Match[str]) -> str:
    return "the end of the statement" if m.group(1) == "SENTINEL" else repr(m.group(2))


def _first_error(exc: sqlglot.errors.ParseError) -> str:
    errors = getattr(exc, "errors", None)
    if errors:
        e = dict(errors[0])
        e["description"] = _TOKEN.sub(_token, str(e.get("description")))
        where = f"line {e.get('line')}, column {e.get('col')}"
        return f"{e.get('description')} at {where}: {original(exc)}"
    return str(exc)


def run(ctx: Context, tree: exp.Expression) -> DataFrame:
    """Run one parsed statement; its result as a DataFrame."""
    ctx.resolve_names(tree)
    out: DataFrame = _dispatch(ctx, tree)
    return out


def _dispatch(ctx: Context, tree: exp.Expression) -> Any:
    if isinstance(tree, TRANSACTIONS):
        raise ValueError(
            f"{original(tree)!r} needs a lakehouse.spark.SqlSession "
            "(BEGIN ... COMMIT spans several sql() calls)"
        )
    if isinstance(tree, QUERIES):
        from lakehouse.spark.sql.query import frame_of

        return frame_of(ctx, tree)
    if isinstance(tree, (exp.Insert, exp.Delete, exp.Update)):
        from lakehouse.spark.sql import dml

        if isinstance(tree, exp.Insert):
            return dml.insert(ctx, tree)
        if isinstance(tree, exp.Delete):
            return dml.delete(ctx, tree)
        return dml.update(ctx, tree)
    if isinstance(tree, exp.Merge):
        from lakehouse.spark.sql.merge import merge

        return merge(ctx, tree)
    if isinstance(tree, (exp.Create, exp.Drop, exp.Alter)):
        from lakehouse.spark.sql import ddl

        if isinstance(tree, exp.Create):
            return ddl.create(ctx, tree)
        if isinstance(tree, exp.Drop):
            return ddl.drop(ctx, tree)
        return ddl.alter(ctx, tree)
    if isinstance(tree, exp.Describe):
        from lakehouse.spark.sql import catalog

        return catalog.describe(ctx, tree)
    if isinstance(tree, exp.Command) and str(tree.this).upper() in ("SHOW", "CALL"):
        from lakehouse.spark.sql import catalog

        if str(tree.this).upper() == "SHOW":
            return catalog.show(ctx, tree)
        return catalog.call(ctx, tree)
    if isinstance(tree, exp.Command) and str(tree.this).upper() == "EXPLAIN":
        return _explain(ctx, tree)
    if isinstance(tree, exp.Command) and str(tree.this).upper() in ("CREATE", "ALTER"):
        from lakehouse.spark.sql import ddl  # WITH DBPROPERTIES, UNSET TBLPROPERTIES, ...

        return ddl.command(ctx, tree)
    for t in tree.find_all(exp.Table):
        name = table_name(t)
        if ctx.is_table(name) or ctx.is_view(name):
            kind = tree.key.upper() if not isinstance(tree, exp.Command) else str(tree.this)
            raise unsupported(f"{kind} on the lakehouse object {name}")
    return to_spark(ctx, tree)


_EXPLAIN_MODE = re.compile(r"\s*(EXTENDED|FORMATTED|CODEGEN|COST)\b", re.IGNORECASE)


def _explain(ctx: Context, tree: exp.Command) -> DataFrame:
    """``EXPLAIN [mode] <query>``: Spark's plan of the query as it runs over the
    lakehouse's DataFrames; anything else as Spark reads it."""
    rest = str(tree.expression.this) if tree.expression is not None else ""
    m = _EXPLAIN_MODE.match(rest)
    mode, body = (m.group(1).upper() + " ", rest[m.end() :]) if m else ("", rest)
    try:
        query = sqlglot.parse_one(body, read="spark")
    except sqlglot.errors.SqlglotError:
        return to_spark(ctx, tree)
    if not isinstance(query, QUERIES):
        return to_spark(ctx, tree)
    from lakehouse.spark.sql.query import frame_of

    query.meta["sql"] = body.strip()
    return frame_of(ctx, query, prefix=f"EXPLAIN {mode}")
