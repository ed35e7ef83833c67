"""``INSERT``, ``DELETE`` and ``UPDATE`` on lakehouse tables.

Runs on the driver: each statement is checked against the table (its columns,
partition columns, the clauses given) before any job runs, then goes through
the Python calls inside ``ctx.writing()`` (so it joins an open ``BEGIN``):

==========================================  =======================================
statement                                   call
==========================================  =======================================
``INSERT INTO ns.t [(c, ...)] query``       ``write(mode="append")``
``INSERT INTO ns.t BY NAME query``          the same, columns matched by name
``INSERT INTO ns.t REPLACE WHERE c query``  ``write(mode="overwrite", where=c)``
``INSERT OVERWRITE ns.t query``             ``write(mode="replace_partitions")``
``INSERT OVERWRITE ns.t PARTITION (p = v)`` ``write(mode="overwrite", where="p = v")``
``DELETE FROM ns.t [WHERE c]``              ``delete(condition=c or "true")``
``UPDATE ns.t SET c = e, ... [WHERE c]``    ``update(condition, {c: e})``
==========================================  =======================================

``query`` is a ``SELECT`` (any, run by Spark through
:func:`~lakehouse.spark.sql.query.frame_of`), ``VALUES`` or ``TABLE x``. Its
columns map to the table's by position (all columns in table order, or the
listed ones; columns left out are null) unless ``BY NAME``; a static
``PARTITION (p = v)`` value fills ``p`` and the query gives the other
columns. The query's types must convert safely (as ``lakehouse.spark.write``
checks), except that a literal of ``VALUES`` or ``PARTITION`` is cast to its
column's type when its value fits exactly (``1`` into a bigint, ``1.5`` into a
double, ``'2026-01-01'`` into a date) and refused when it does not (``'abc'``
into an int). Each returns the one-row ``num_affected_rows``: rows written,
deleted or updated.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlglot import exp

from lakehouse.spark import ops
from lakehouse.spark.sql.context import Context
from lakehouse.spark.sql.names import (
    CATALOG,
    lakehouse_target,
    plain_target,
    table_name,
    unsupported,
)
from lakehouse.spark.types import spark_type
from lakehouse.spark.update import update as update_rows

#: Insert clauses of other dialects (sqlglot parses them; Spark has none of them)
_INSERT_OTHER = {
    "exists": "INSERT ... IF NOT EXISTS",
    "ignore": "INSERT IGNORE",
    "alternative": "INSERT OR ...",
    "conflict": "INSERT ... ON CONFLICT",
    "returning": "INSERT ... RETURNING",
    "is_function": "INSERT INTO FUNCTION",
    "stored": "INSERT ... STORED AS",
    "settings": "INSERT ... SETTINGS",
    "default": "INSERT ... DEFAULT VALUES",
    "partition": "INSERT ... PARTITION",
    "using": "INSERT ... USING",
    "hint": "a hint in INSERT",
}
_DELETE_OTHER = {
    "using": "DELETE ... USING",
    "tables": "a multi-table DELETE",
    "limit": "DELETE ... LIMIT",
    "order": "DELETE ... ORDER BY",
    "returning": "DELETE ... RETURNING",
    "cluster": "DELETE ... CLUSTER",
    "hint": "a hint in DELETE",
    "with_": "WITH ... DELETE (a CTE)",
}
_UPDATE_OTHER = {
    "from_": "UPDATE ... FROM",
    "limit": "UPDATE ... LIMIT",
    "order": "UPDATE ... ORDER BY",
    "returning": "UPDATE ... RETURNING",
    "options": "UPDATE options",
    "hint": "a hint in UPDATE",
    "with_": "WITH ... UPDATE (a CTE)",
}


def insert(ctx: Context, tree: exp.Insert) -> DataFrame:
    """``INSERT INTO`` / ``INSERT OVERWRITE`` a lakehouse table (module doc)."""
    _refuse(tree, _INSERT_OTHER)
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    if not isinstance(target, exp.Table):
        raise unsupported(f"INSERT into {tree.this.sql(dialect='spark')}")
    name = table_name(target)
    verb = "INSERT OVERWRITE" if tree.args.get("overwrite") else "INSERT INTO"
    if not ctx.is_table(name):
        return _not_lakehouse(ctx, tree, target, name, verb)
    plain_target(target, name, verb)
    listed = [i.name for i in tree.this.expressions] if isinstance(tree.this, exp.Schema) else None
    query = _query(tree)
    replace_where = tree.args.get("where")
    spec = target.args.get("partition")
    if replace_where is not None and (spec is not None or tree.args.get("overwrite")):
        raise unsupported(f"{verb} ... REPLACE WHERE with OVERWRITE or PARTITION")
    with ctx.writing() as t:
        d = t.describe_table(name)
        schema: pa.Schema = d.schema
        static, dynamic = _partition_spec(spec, d, name)
        by_name = bool(tree.args.get("by_name"))
        if by_name and listed is not None:
            raise unsupported(f"{verb} {name} BY NAME with a column list")
        columns = _target_columns(listed, schema, static, name)
        if isinstance(query, exp.Values) and not by_name:
            query = _typed_values(query, [schema.field(c) for c in columns], name)
        from lakehouse.spark.sql.query import frame_of

        frame = frame_of(ctx, query)
        if by_name:
            frame = _by_name(frame, schema, static, name)
        else:
            if len(frame.columns) != len(columns):
                raise ValueError(
                    f"{verb} {name}: the query gives {len(frame.columns)} columns for the "
                    f"{len(columns)} columns {', '.join(columns)} of {name}"
                )
            if frame.columns != columns:
                frame = frame.toDF(*columns)
        for column, (value_sql, _) in static.items():
            frame = frame.withColumn(column, F.expr(value_sql))
        mode, where = _mode(tree, static, dynamic, replace_where)
        _, n = ops.write_counted(ctx.lh, frame, name, mode=mode, where=where, txn=t)
    return ctx.result(num_affected_rows=n)


def delete(ctx: Context, tree: exp.Delete) -> DataFrame:
    """``DELETE FROM ns.t [[AS] x] [WHERE cond]``: through ``lakehouse.spark.delete``."""
    _refuse(tree, _DELETE_OTHER)
    target = tree.this
    name = lakehouse_target(ctx, target, "DELETE FROM")
    cond = _condition(tree, target, name, "DELETE")
    with ctx.writing() as t:
        n = ops.delete(ctx.lh, ctx.spark, name, cond, txn=t)
    return ctx.result(num_affected_rows=n)


def update(ctx: Context, tree: exp.Update) -> DataFrame:
    """``UPDATE ns.t [[AS] x] SET c = expr, ... [WHERE cond]``: through
    ``lakehouse.spark.update`` (expressions see the old row)."""
    _refuse(tree, _UPDATE_OTHER)
    target = tree.this
    name = lakehouse_target(ctx, target, "UPDATE")
    cond = _condition(tree, target, name, "UPDATE")
    with ctx.writing() as t:
        schema = t.describe_table(name).schema
        known = {c.lower(): c for c in schema.names}
        values: dict[str, str] = {}
        for item in tree.expressions:
            if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
                raise unsupported(f"UPDATE {name} SET {item.sql(dialect='spark')}")
            column = _unqualified(item.this, target, name)
            if not isinstance(column, exp.Column) or column.table:
                raise unsupported(
                    f"UPDATE {name} SET {item.this.sql(dialect='spark')} (a nested field)",
                    "set the whole column, e.g. with named_struct(...)",
                )
            col = known.get(column.name.lower())
            if col is None:
                raise ValueError(
                    f"UPDATE {name}: {name} has no column {column.name!r} "
                    f"(its columns: {', '.join(schema.names)})"
                )
            if col in values:
                raise ValueError(f"UPDATE {name}: column {col!r} is set twice")
            value = _unqualified(item.expression, target, name)
            _no_subquery(value, f"a subquery in UPDATE {name} SET {col}")
            values[col] = value.sql(dialect="spark")
        n = update_rows(ctx.lh, ctx.spark, name, cond, values, txn=t)
    return ctx.result(num_affected_rows=n)


# ---------------------------------------------------------------------------- targets


def _refuse(tree: exp.Expression, clauses: dict[str, str]) -> None:
    for arg, construct in clauses.items():
        if tree.args.get(arg):
            raise unsupported(construct)


def _not_lakehouse(
    ctx: Context, tree: exp.Insert, target: exp.Table, name: str, verb: str
) -> DataFrame:
    """An INSERT whose target is not a lakehouse table: a Spark table's INSERT that
    names no lakehouse object goes to Spark as written; else ValueError."""
    if ctx.is_view(name):
        raise ValueError(f"{verb} {name}: {name} is a lakehouse view, not a table")
    if ctx.is_spark_table(name):
        for ref in tree.find_all(exp.Table):
            other = table_name(ref)
            if ref is not target and (ctx.is_table(other) or ctx.is_view(other)):
                raise unsupported(
                    f"{verb} the Spark table {name} from the lakehouse object {other}",
                    "read it with lakehouse.spark.sql('SELECT ...') and write the DataFrame",
                )
        from lakehouse.spark.sql.context import to_spark

        return to_spark(ctx, tree)
    raise ValueError(f"{verb} {name}: {name} is neither a lakehouse table nor a Spark table")


def _query(tree: exp.Insert) -> exp.Expression:
    """The rows to insert as a query tree: the statement's SELECT/VALUES (with a CTE
    written before INSERT moved into it), or ``SELECT * FROM x`` for ``TABLE x``."""
    source = tree.args.get("source")
    query = tree.expression
    if isinstance(source, exp.Table):
        query = exp.select("*").from_(source.copy())
    if query is None:
        raise unsupported(f"INSERT without a query: {tree.sql(dialect='spark')}")
    while isinstance(query, exp.Subquery) and not query.alias:
        query = query.this
    cte = tree.args.get("with_")
    if cte is not None:
        if not isinstance(query, (exp.Select, exp.SetOperation)) or query.args.get("with_"):
            query = exp.select("*").from_(query.subquery("_lh_insert"))
        query = query.copy()
        query.set("with_", cte.copy())
    out: exp.Expression = query
    return out


# ---------------------------------------------------------------------------- columns


def _partition_spec(
    spec: Any, d: Any, name: str
) -> tuple[dict[str, tuple[str, exp.Expression]], list[str]]:
    """A ``PARTITION (...)`` clause: ``{column: (CAST(value AS type) SQL, value)}``
    for static values (checked to fit the column) and the dynamic columns."""
    static: dict[str, tuple[str, exp.Expression]] = {}
    dynamic: list[str] = []
    if spec is None:
        return static, dynamic
    schema: pa.Schema = d.schema
    identity = {p.lower(): p for p in d.partition_by if p in schema.names}
    for item in spec.expressions:
        col_node, value = (item.this, item.expression) if isinstance(item, exp.EQ) else (item, None)
        if not isinstance(col_node, exp.Column) or col_node.table:
            raise unsupported(f"PARTITION ({item.sql(dialect='spark')}) of {name}")
        col = identity.get(col_node.name.lower())
        if col is None:
            parts = ", ".join(d.partition_by) or "none"
            raise ValueError(
                f"PARTITION ({item.sql(dialect='spark')}): {col_node.name!r} is not an identity "
                f"partition column of {name} (its partitioning: {parts})"
            )
        if col in static or col in dynamic:
            raise ValueError(f"PARTITION (...) of {name} names {col!r} twice")
        if value is None:
            dynamic.append(col)
        else:
            field = schema.field(col)
            static[col] = (_cast(value, field, name).sql(dialect="spark"), value)
    return static, dynamic


def _target_columns(
    listed: list[str] | None, schema: pa.Schema, static: dict[str, Any], name: str
) -> list[str]:
    """The table columns the query's columns go to, by position."""
    if listed is None:
        return [c for c in schema.names if c not in static]
    known = {n.lower(): n for n in schema.names}
    out: list[str] = []
    for c in listed:
        col = known.get(c.lower())
        if col is None:
            raise ValueError(
                f"INSERT INTO {name} ({', '.join(listed)}): {name} has no column {c!r} "
                f"(its columns: {', '.join(schema.names)})"
            )
        if col in out:
            raise ValueError(f"INSERT INTO {name}: column {col!r} is listed twice")
        if col in static:
            raise ValueError(
                f"INSERT INTO {name}: column {col!r} is listed and given by PARTITION (...)"
            )
        out.append(col)
    return out


def _by_name(frame: DataFrame, schema: pa.Schema, static: dict[str, Any], name: str) -> DataFrame:
    """``BY NAME``: the query's columns renamed to the table's spelling (Spark's names
    are case-insensitive); an unknown one is left for the write to name."""
    known = {n.lower(): n for n in schema.names}
    renamed = [known.get(c.lower(), c) for c in frame.columns]
    for c in renamed:
        if c in static:
            raise ValueError(
                f"INSERT INTO {name} BY NAME: column {c!r} is given by the query and by "
                "PARTITION (...)"
            )
    return frame.toDF(*renamed)


def _mode(
    tree: exp.Insert,
    static: dict[str, tuple[str, exp.Expression]],
    dynamic: list[str],
    replace_where: Any,
) -> tuple[str, str | None]:
    """The write's ``mode`` and ``where``."""
    if replace_where is not None:
        _no_subquery(replace_where, "a subquery in INSERT ... REPLACE WHERE")
        return "overwrite", replace_where.sql(dialect="spark")
    if not tree.args.get("overwrite"):
        return "append", None
    if static and not dynamic:  # every row of those partitions goes, even with no new row
        terms: list[exp.Expression] = []
        for col, (_, value) in static.items():
            column = exp.column(col, quoted=True)
            if isinstance(value, exp.Null):
                terms.append(exp.Is(this=column, expression=exp.Null()))
            else:
                terms.append(exp.EQ(this=column, expression=value.copy()))
        return "overwrite", exp.and_(*terms).sql(dialect="spark")
    return "replace_partitions", None


# ---------------------------------------------------------------------------- literals


def _typed_values(values: exp.Values, fields: list[pa.Field], name: str) -> exp.Values:
    """``VALUES`` with each literal cell cast to its column's type (checked here to fit
    it exactly); other cells (expressions) are left for Spark to type."""
    rows = []
    for i, row in enumerate(values.expressions):
        cells = row.expressions if isinstance(row, exp.Tuple) else [row]
        if len(cells) != len(fields):
            raise ValueError(
                f"INSERT INTO {name}: VALUES row {i + 1} has {len(cells)} values for the "
                f"{len(fields)} columns {', '.join(f.name for f in fields)} of {name}"
            )
        typed = []
        for cell, field in zip(cells, fields):
            if _constant(cell) is _NOT_CONSTANT:
                _no_subquery(cell, f"a subquery in INSERT INTO {name} VALUES")
                typed.append(cell.copy())
            else:
                typed.append(_cast(cell, field, name))
        rows.append(exp.Tuple(expressions=typed))
    return exp.Values(expressions=rows)


_NOT_CONSTANT = object()


def _cast(cell: exp.Expression, field: pa.Field, name: str) -> exp.Cast:
    """``CAST(<cell> AS <column type>)`` for a literal ``cell`` that fits ``field``
    exactly; ValueError naming the column when it does not (or is not a literal)."""
    value = _constant(cell)
    text = cell.sql(dialect="spark")
    if value is _NOT_CONSTANT:
        raise unsupported(f"the value {text} for column {field.name!r} of {name} (not a literal)")
    if value is None:
        if not field.nullable:
            raise ValueError(f"column {field.name!r} of {name} is not nullable: NULL given")
    else:
        _fits(value, text, field, name)
    to = exp.DataType.build(spark_type(field.type, field.name).simpleString(), dialect="spark")
    return exp.Cast(this=cell.copy(), to=to)


def _fits(value: Any, text: str, field: pa.Field, name: str) -> None:
    target = field.type
    if isinstance(value, str) and pa.types.is_timestamp(target):
        try:  # pyarrow wants a zone offset for an aware type; Spark's session zone applies
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            value = _BAD
    elif isinstance(value, (int, float)) and pa.types.is_decimal(target):
        # 7 into decimal(12, 2): the value's own digits, not int64's 19
        value = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    try:
        if value is _BAD:
            raise ValueError("not a timestamp")
        pa.array([value]).cast(target, safe=True)
    except (
        pa.ArrowInvalid,
        pa.ArrowTypeError,
        pa.ArrowNotImplementedError,
        OverflowError,
        ValueError,
    ) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(
            f"column {field.name!r} of {name}: the value {text} does not fit its type "
            f"{spark_type(target, field.name).simpleString()} ({reason})"
        ) from None


_BAD = object()


def _constant(e: exp.Expression) -> Any:
    """The Python value of a literal (a number, a string, NULL, TRUE/FALSE, a typed
    ``DATE '...'`` / ``TIMESTAMP '...'``), else ``_NOT_CONSTANT``."""
    if isinstance(e, exp.Paren):
        return _constant(e.this)
    if isinstance(e, exp.Null):
        return None
    if isinstance(e, exp.Boolean):
        return bool(e.this)
    neg = isinstance(e, exp.Neg)
    inner = e.this if neg else e
    if isinstance(inner, exp.Literal) and not inner.is_string:
        text = ("-" if neg else "") + str(inner.this)
        try:
            return int(text)
        except ValueError:
            pass
        try:
            return float(text) if "e" in text.lower() else Decimal(text)
        except (ValueError, InvalidOperation):
            return _NOT_CONSTANT
    if neg:
        return _NOT_CONSTANT
    if isinstance(e, exp.Literal):
        return str(e.this)
    if isinstance(e, exp.Cast) and isinstance(e.this, exp.Literal) and e.this.is_string:
        text = str(e.this.this)
        try:
            if e.to.is_type(exp.DataType.Type.DATE):
                return dt.date.fromisoformat(text)
            if e.to.is_type(*exp.DataType.TEMPORAL_TYPES):
                return dt.datetime.fromisoformat(text)
        except ValueError:
            return _NOT_CONSTANT
    return _NOT_CONSTANT


# ---------------------------------------------------------------------------- conditions


def _condition(tree: exp.Expression, target: exp.Table, name: str, verb: str) -> str:
    """The WHERE condition as Spark SQL over the table's bare column names ("true"
    without WHERE)."""
    where = tree.args.get("where")
    if where is None:
        return "true"
    cond = _unqualified(where.this, target, name)
    _no_subquery(cond, f"a subquery in the {verb} condition")
    return cond.sql(dialect="spark")


def _unqualified(e: exp.Expression, target: exp.Table, name: str) -> exp.Expression:
    """``e`` (a copy) with column references qualified by the target (its alias, ``t``,
    ``ns.t`` or ``lakehouse.ns.t``) made bare: ``x.a`` -> ``a``."""
    alias = target.alias.lower() if target.alias else None
    ns, tbl = (p.lower() for p in name.split(".", 1))

    def strip(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Column) or not node.table:
            return node
        t, db, cat = node.table.lower(), node.db.lower(), node.catalog.lower()
        ours = (
            (alias is not None and t == alias and not db)
            or (t == tbl and not db)
            or (t == tbl and db == ns and cat in ("", CATALOG))
        )
        if not ours:
            return node
        bare = node.copy()
        for arg in ("table", "db", "catalog"):
            bare.set(arg, None)
        return bare

    return e.copy().transform(strip)


def _no_subquery(e: exp.Expression, construct: str) -> None:
    if e.find(exp.Select, exp.Subquery, exp.Exists) is not None:
        raise unsupported(construct, "rewrite it as MERGE INTO ... USING (subquery)")
