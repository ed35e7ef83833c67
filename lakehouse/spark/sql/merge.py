"""``MERGE INTO``: Delta's and Spark's grammar onto ``lakehouse.spark.merge``.

::

    MERGE INTO ns.t [[AS] t]
    USING <lakehouse table | temp view | Spark table | (subquery)> [[AS] s]
    ON <condition>
    WHEN MATCHED [AND <cond>] THEN UPDATE SET c = expr, ... | UPDATE SET * | DELETE
    WHEN NOT MATCHED [BY TARGET] [AND <cond>] THEN INSERT (c, ...) VALUES (expr, ...)
                                                 | INSERT *
    ...                                       (several WHEN clauses, first that holds wins)

Runs on the driver. The target must be a lakehouse table (at its latest
version, or the open transaction's); the source is a query run by Spark
through :func:`~lakehouse.spark.sql.query.frame_of` (a lakehouse table or view
in it, with ``VERSION AS OF``, is read by ``lakehouse.spark.read``). Column
references qualified by the target or the source (their aliases, or their
names when they have none: ``t.c``, ``ns.t.c``) are rewritten to the aliases
the Python call uses; each ``WHEN`` becomes a
:class:`~lakehouse.spark.merge_clauses.MergeClause`.

The simple form goes through the key merge (the fast path of
``lakehouse.spark.merge(on=keys, when_matched=, when_not_matched=)``): ``ON``
equalities of same-named columns (``t.k = s.k AND ...``) with at most one
unconditioned ``WHEN MATCHED THEN UPDATE SET * | DELETE`` and at most one
unconditioned ``WHEN NOT MATCHED THEN INSERT *``. When that path refuses the
source because of its keys (null or repeated source keys, or a key matching
two target rows), before anything is written, the clause merge runs instead
and gives SQL's answer (null keys match nothing; a target row changed by two
source rows is an error). Everything else goes through the clause merge.

``WHEN NOT MATCHED BY SOURCE [AND c] THEN UPDATE SET c = expr, ... | DELETE``
(Spark's and Delta's) acts on target rows no source row matches (a full outer
join then).

Not supported (ValueError before any job): a target at a version, a target
that is not a lakehouse table, subqueries in conditions and values,
nested-field assignments.

Returns Delta's one-row result: ``num_affected_rows``, ``num_updated_rows``,
``num_deleted_rows``, ``num_inserted_rows`` (bigint).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from sqlglot import exp

from lakehouse.errors import MergeKeyError
from lakehouse.model import MergeResult
from lakehouse.spark.merge import merge as merge_rows
from lakehouse.spark.merge_clauses import MergeClause
from lakehouse.spark.sql.context import Context
from lakehouse.spark.sql.names import (
    CATALOG,
    lakehouse_target,
    table_name,
    unsupported,
)
from lakehouse.spark.sql.query import frame_of
from lakehouse.spark.writer import col, not_null_message

#: the source's alias when a subquery has none
_SOURCE = "source"


class _Side:
    """One side of the merge: its alias and the qualifiers that name it."""

    def __init__(self, alias: str, spellings: set[tuple[str, ...]]) -> None:
        self.alias = alias
        self.spellings = spellings


def merge(ctx: Context, tree: exp.Merge) -> DataFrame:
    """Run a ``MERGE INTO`` statement (module doc); its one-row counts."""
    target = tree.this
    name = lakehouse_target(ctx, target, "MERGE INTO")
    tgt = _side(target, name)
    using = tree.args.get("using")
    src_frame, src = _source(ctx, using)
    if tgt.alias.lower() == src.alias.lower():
        raise ValueError(
            f"MERGE INTO {name}: the target and the source are both called {tgt.alias!r}; "
            "give one of them an alias (AS ...)"
        )
    if tree.args.get("using_cond"):
        raise unsupported(f"MERGE INTO {name} ... USING (columns)", "write ON t.c = s.c")
    on_tree = tree.args.get("on")
    if on_tree is None:
        raise ValueError(f"MERGE INTO {name} needs an ON condition")
    on = _requalified(on_tree, tgt, src, f"the ON condition of MERGE INTO {name}")
    whens = tree.args.get("whens")
    items = list(whens.expressions) if whens is not None else []
    if not items:
        raise ValueError(f"MERGE INTO {name} needs at least one WHEN clause")
    clauses = [_clause(w, tgt, src, name) for w in items]
    with ctx.writing() as t:
        schema = t.describe_table(name).schema
        keys = _simple_keys(on, tgt, src, clauses, schema.names, src_frame.columns)
        result = None
        if keys is not None:
            result = _key_merge(ctx, t, src_frame, name, keys, clauses, schema.names)
        if result is None:
            result = merge_rows(
                ctx.lh,
                src_frame,
                name,
                on.sql(dialect="spark"),
                txn=t,
                clauses=clauses,
                source_alias=src.alias,
                target_alias=tgt.alias,
            )
    return ctx.result(
        num_affected_rows=result.inserted + result.updated + result.deleted,
        num_updated_rows=result.updated,
        num_deleted_rows=result.deleted,
        num_inserted_rows=result.inserted,
    )


# ---------------------------------------------------------------------------- the sides


def _side(table: exp.Table, name: str) -> _Side:
    """A table reference's alias (its own, else its last name part) and the
    qualifiers naming it (the alias; without one also ``t``, ``ns.t``,
    ``lakehouse.ns.t``)."""
    if table.alias:
        return _Side(table.alias, {(table.alias.lower(),)})
    parts = tuple(p.lower() for p in name.split("."))
    spellings = {parts[i:] for i in range(len(parts))}
    if len(parts) == 2:
        spellings.add((CATALOG, *parts))
    return _Side(table.name, spellings)


def _source(ctx: Context, using: Any) -> tuple[DataFrame, _Side]:
    """The source as a DataFrame (Spark runs its query) and its side."""
    if isinstance(using, exp.Table) and isinstance(using.this, exp.Identifier):
        name = table_name(using)
        ref = using.copy()
        ref.set("alias", None)
        frame = frame_of(ctx, exp.select("*").from_(ref))
        return frame, _side(using, name)
    if isinstance(using, exp.Subquery):
        query = using.this
        frame = frame_of(ctx, query)
        alias = using.alias or _SOURCE
        return frame, _Side(alias, {(alias.lower(),)})
    what = using.sql(dialect="spark") if isinstance(using, exp.Expression) else repr(using)
    raise unsupported(f"MERGE ... USING {what}", "use a table, a view or (SELECT ...)")


def _requalified(e: exp.Expression, tgt: _Side, src: _Side, what: str) -> exp.Expression:
    """``e`` (a copy) with columns qualified by either side (any spelling) qualified
    by that side's alias alone: ``ns.t.c`` -> ``t.c``. Subqueries are refused."""
    if e.find(exp.Select, exp.Subquery, exp.Exists) is not None:
        raise unsupported(f"a subquery in {what}")

    def fix(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Column) or not node.table:
            return node
        q = tuple(p.lower() for p in (node.catalog, node.db, node.table) if p)
        for side in (tgt, src):
            if q in side.spellings:
                out = node.copy()
                out.set("catalog", None)
                out.set("db", None)
                out.set("table", exp.to_identifier(side.alias))
                return out
        return node

    return e.copy().transform(fix)


# ---------------------------------------------------------------------------- clauses


def _clause(w: exp.Expression, tgt: _Side, src: _Side, name: str) -> MergeClause:
    if not isinstance(w, exp.When):
        raise unsupported(f"MERGE INTO {name} ... {w.sql(dialect='spark')}")
    matched = bool(w.args.get("matched"))
    by_source = bool(w.args.get("source"))
    head = "WHEN MATCHED" if matched else "WHEN NOT MATCHED"
    if by_source:
        head += " BY SOURCE"
    cond = w.args.get("condition")
    condition = None
    if cond is not None:
        condition = _requalified(cond, tgt, src, f"a {head} condition").sql(dialect="spark")
    then = w.args.get("then")
    if isinstance(then, exp.Var) and str(then.this).upper() == "DELETE":
        if not matched and not by_source:
            raise ValueError(f"MERGE INTO {name}: {head} ... THEN DELETE is not allowed")
        return MergeClause(matched, "delete", condition, by_source=by_source)
    if isinstance(then, exp.Update):
        if not matched and not by_source:
            raise ValueError(f"MERGE INTO {name}: {head} ... THEN UPDATE is not allowed")
        items = list(then.expressions)
        if len(items) == 1 and isinstance(items[0], exp.Star):
            if by_source:
                raise ValueError(
                    f"MERGE INTO {name}: {head} ... THEN UPDATE SET * is not allowed "
                    "(there is no source row); set the columns"
                )
            return MergeClause(True, "update", condition, None)
        values: dict[str, str] = {}
        for item in items:
            if not isinstance(item, exp.EQ):
                raise unsupported(f"MERGE INTO {name} ... UPDATE SET {item.sql(dialect='spark')}")
            column = _target_column(item.this, tgt, name, "UPDATE SET")
            if column.lower() in {k.lower() for k in values}:
                raise ValueError(f"MERGE INTO {name}: column {column!r} is set twice")
            value = _requalified(item.expression, tgt, src, f"UPDATE SET {column}")
            values[column] = value.sql(dialect="spark")
        return MergeClause(matched, "update", condition, values, by_source=by_source)
    if isinstance(then, exp.Insert):
        if matched or by_source:
            raise ValueError(f"MERGE INTO {name}: {head} ... THEN INSERT is not allowed")
        if isinstance(then.this, exp.Star):
            return MergeClause(False, "insert", condition, None)
        row = then.expression
        if not isinstance(row, exp.Tuple) or not isinstance(then.this, exp.Tuple):
            raise unsupported(
                f"MERGE INTO {name} ... INSERT {then.sql(dialect='spark')}",
                "write INSERT (c, ...) VALUES (expr, ...) or INSERT *",
            )
        columns = [_target_column(c, tgt, name, "INSERT") for c in then.this.expressions]
        exprs = list(row.expressions)
        if len(columns) != len(exprs):
            raise ValueError(
                f"MERGE INTO {name}: INSERT names {len(columns)} columns but gives "
                f"{len(exprs)} values"
            )
        ins: dict[str, str] = {}
        for c, v in zip(columns, exprs, strict=True):
            if c.lower() in {k.lower() for k in ins}:
                raise ValueError(f"MERGE INTO {name}: column {c!r} is inserted twice")
            ins[c] = _requalified(v, tgt, src, f"INSERT value of {c}").sql(dialect="spark")
        return MergeClause(False, "insert", condition, ins)
    what = then.sql(dialect="spark") if isinstance(then, exp.Expression) else repr(then)
    raise unsupported(f"MERGE INTO {name} ... {head} THEN {what}")


def _target_column(e: Any, tgt: _Side, name: str, verb: str) -> str:
    """The target column an ``UPDATE SET`` / ``INSERT`` names (bare or qualified by
    the target)."""
    if isinstance(e, exp.Column):
        q = tuple(p.lower() for p in (e.catalog, e.db, e.table) if p)
        if not q or q in tgt.spellings:
            return e.name
        raise unsupported(
            f"MERGE INTO {name} ... {verb} {e.sql(dialect='spark')} (a nested field or "
            "another table's column)",
            "name a column of the target",
        )
    what = e.sql(dialect="spark") if isinstance(e, exp.Expression) else repr(e)
    raise unsupported(f"MERGE INTO {name} ... {verb} {what}")


# ---------------------------------------------------------------------------- fast path


def _simple_keys(
    on: exp.Expression,
    tgt: _Side,
    src: _Side,
    clauses: list[MergeClause],
    target_columns: list[str],
    source_columns: list[str],
) -> list[str] | None:
    """The key columns when the merge is the simple form (module doc), else None."""
    matched = [c for c in clauses if c.matched]
    inserts = [c for c in clauses if not c.matched]
    if len(matched) > 1 or len(inserts) > 1 or any(c.by_source for c in clauses):
        return None
    if any(c.condition is not None for c in clauses):
        return None
    if matched and matched[0].action == "update" and matched[0].values is not None:
        return None
    if inserts and inserts[0].values is not None:
        return None
    tcols = {n.lower(): n for n in target_columns}
    scols = {n.lower() for n in source_columns}
    conjuncts = list(on.flatten()) if isinstance(on, exp.And) else [on]
    keys: list[str] = []
    for c in conjuncts:
        if not isinstance(c, exp.EQ):
            return None
        a, b = c.this, c.expression
        if not isinstance(a, exp.Column) or not isinstance(b, exp.Column):
            return None
        if a.db or b.db or a.name.lower() != b.name.lower():
            return None
        if {a.table.lower(), b.table.lower()} != {tgt.alias.lower(), src.alias.lower()}:
            return None
        k = a.name.lower()
        if k not in tcols or k not in scols or tcols[k] in keys:
            return None
        keys.append(tcols[k])
    return keys


def _key_merge(
    ctx: Context,
    t: Any,
    src_frame: DataFrame,
    name: str,
    keys: list[str],
    clauses: list[MergeClause],
    target_columns: list[str],
) -> MergeResult | None:
    """The simple form through the key merge; None when it refuses the source's keys
    (nothing written then), for the clause merge to take."""
    matched = [c.action for c in clauses if c.matched]
    inserts = [c for c in clauses if not c.matched]
    names = src_frame.columns
    if not set(names) <= set(target_columns):
        # the source's columns of the target's names (others are not merged: Delta's *)
        by_lower = {c.lower(): c for c in names}
        src_frame = src_frame.select(
            *[col(by_lower[n.lower()]).alias(n) for n in target_columns if n.lower() in by_lower]
        )
    try:
        res: MergeResult = merge_rows(
            ctx.lh,
            src_frame,
            name,
            on=keys,
            txn=t,
            when_matched=matched[0] if matched else "ignore",
            when_not_matched="insert" if inserts else "ignore",
        )
    except MergeKeyError:  # refused before anything was written: SQL's semantics differ
        return None
    except ValueError as exc:  # a null key in a not-nullable key column: matches nothing
        if any(not_null_message(k, name) in str(exc) for k in keys):
            return None
        raise
    return res
