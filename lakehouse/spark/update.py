"""``update``: set columns of the rows matching a Spark SQL condition.

The Python ``txn.update`` with Spark SQL: the condition and the new values
are Spark expressions, evaluated by executors on the old row. One scan of
the table (only the files that may hold a matching row, pruned on the
driver) produces the matched rows' new versions with their file and row,
persisted (memory, then local disk); the first job collects at most
``inline.max_rows + 1`` of them (Spark's limit, all files in one job) and is
the only one that reads the table. Then:

* at most the table's ``inline.max_rows`` rows: what that job returned is
  recorded with ``txn.replace_rows`` (new versions inlined,
  the change feed's pre/post images paired row by row);
* more (from the cache): executors write the new versions as data files (one job) and
  return the old rows' positions as bitmaps per file (one job,
  :mod:`lakehouse.spark.positions`); the driver marks those rows deleted as
  updated, then registers the files as their new versions. Matched rows of
  files the transaction itself added are collected and go through
  ``replace_rows`` instead (an update of its own inserts stays an insert)::

    executors: scan ── where(cond) ── new values + (_lh_file, _lh_row) ── persist ── limit
    driver:    few rows:  replace_rows (what the limit returned)
               many rows: bitmaps (job) ── write files (job) ── delete_rows ── add_files

The values are checked on the driver before any job: unknown columns,
expressions Spark cannot analyse, and results that cannot be cast safely to
the column's type raise ValueError (a literal is checked against the type
as a value: ``{"qty": "5"}`` fits a ``smallint`` column).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.data import inline
from lakehouse.spark import ops
from lakehouse.spark.jobs import spark_job
from lakehouse.spark.positions import collect_bitmaps
from lakehouse.spark.reader import FILE_COL, ROW_COL, base_name
from lakehouse.spark.session import configure
from lakehouse.spark.types import ColumnPlan, match_columns, spark_type
from lakehouse.spark.writer import col, prepare

NOT_LITERAL = object()


def update(
    lh: Any,
    spark: SparkSession,
    table: str,
    condition: Any,
    values: Mapping[str, Any],
    *,
    txn: Any = None,
) -> int:
    """Set ``values`` (``{column: Spark SQL expression str, a Column, or a Python
    value}``) on the rows of ``table`` matching the Spark SQL ``condition`` (str or
    Column); expressions see the old row. Commits, or joins ``txn``. Returns the
    rows updated."""
    if not isinstance(values, Mapping) or not values:
        raise TypeError("values must be a non-empty dict {column: Spark SQL expression or value}")
    for name in values:
        if not isinstance(name, str):
            raise TypeError(f"values keys must be column names (str), not {type(name).__name__}")
    configure(spark)
    cond = ops.spark_condition(spark, condition, "condition")
    with ops.joined(lh, txn) as (t, own):
        tbl = ops.Table(lh, t, table)
        ops.check_names(condition, tbl.schema, table, "condition")
        exprs = _values(spark, tbl, values)
        frame, by_name = tbl.frame(spark, positions=True, where=condition)
        matched = ops.analysed(frame, lambda f: f.where(cond), condition, "condition")
        hits = _new_rows(tbl, matched, exprs, values).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            n = record_updates(lh, t, tbl, hits, by_name)
        finally:
            hits.unpersist()
        if own:
            t.commit()
        return n


def record_updates(
    lh: Any,
    t: Any,
    tbl: ops.Table,
    hits: DataFrame,
    by_name: dict[str, str],
    op: str = "update",
) -> int:
    """Record the persisted matched rows' new versions in ``t`` (``hits``: the table's
    columns with ``_lh_file``/``_lh_row`` of the old row); returns how many. ``op``:
    ``"update"`` or ``"merge"`` (the operation's conflict rules and name)."""
    table = tbl.name
    limit = inline.max_rows(tbl.d)
    if limit:
        # the one scan of the table, which fills the cache: at most limit + 1 rows
        # come back (Spark's limit, in the same job), so few rows need no second job
        with spark_job(f"finding the rows of {table} to update"):
            got = hits.limit(limit + 1).toArrow()
        if got.num_rows <= limit:  # few: the driver writes them (inlined)
            return _replace_rows(t, tbl, got, by_name, op) if got.num_rows else 0
    found = collect_bitmaps(hits, by_name, f"finding the rows of {table} to update")
    if not found:
        return 0
    # rows of files this transaction added (its own inserts, or new versions of rows
    # it updated before) go through replace_rows, which tells the two apart for the
    # change feed; a file's new rows are all inserts or all post-images
    mine = [base_name(p) for p in _added_files(lh, t, table, found)]
    rest = hits.where(~F.col(FILE_COL).isin(mine)) if mine else hits
    found = {p: bm for p, bm in found.items() if base_name(p) not in mine}
    names = [col(c) for c in tbl.schema.names]
    written = tbl.write(rest.select(*names), f"writing the update of {table}") if found else {}
    files = written.get("", [])
    m = 0
    try:
        if found:  # the old rows go first: a table with a primary key sees their keys free
            t.delete_rows(table, found, op=op, updated=True)
        if mine:
            m = _replace_on_driver(t, tbl, hits.where(F.col(FILE_COL).isin(mine)), by_name, op)
    except BaseException:
        tbl.loc.delete([p for p, _ in files])
        raise
    return m + tbl.add(files, updates=True)  # deletes the files if it fails


def _replace_on_driver(
    t: Any, tbl: ops.Table, hits: DataFrame, by_name: dict[str, str], op: str
) -> int:
    """Collect the (cached) new rows and record them with ``txn.replace_rows``."""
    with spark_job(f"collecting the updated rows of {tbl.name}"):
        got = hits.toArrow()
    return _replace_rows(t, tbl, got, by_name, op)


def _replace_rows(
    t: Any, tbl: ops.Table, got: pa.Table, by_name: dict[str, str], op: str = "update"
) -> int:
    """Record collected new rows (with ``_lh_file``/``_lh_row``) with ``replace_rows``."""
    files = got.column(FILE_COL).to_pylist()
    positions = pa.table(
        {
            "path": pa.array([by_name[f] for f in files], pa.string()),
            "position": got.column(ROW_COL).cast(pa.int64()),
        }
    )
    rows = tbl.shaped(got.select(tbl.schema.names))
    return int(t.replace_rows(tbl.name, positions, rows, op=op))


def _added_files(lh: Any, t: Any, table: str, paths: Iterable[str]) -> list[str]:
    """Of ``paths``, the files the transaction ``t`` added (not in its begin version)."""
    with lh.at_version(t.version) as view:
        old = view.file_states(table) if view.table_exists(table) else []
    base = {f.path for f, _ in old}
    return [p for p in paths if p not in base]


def _values(spark: SparkSession, tbl: ops.Table, values: Mapping[str, Any]) -> dict[str, Column]:
    """Each value as a Spark Column: str -> a Spark SQL expression (its column names
    checked), Column as is, anything else a literal of the column's type (checked
    on the driver, as are str expressions that are plain literals)."""
    out: dict[str, Column] = {}
    for name, value in values.items():
        if tbl.schema.get_field_index(name) < 0:
            raise ValueError(
                f"{tbl.name} has no column {name!r} to update (its columns: "
                f"{', '.join(tbl.schema.names)})"
            )
        field = tbl.schema.field(name)
        what = f"value for column {name!r}"
        if isinstance(value, Column):
            out[name] = value
            continue
        if isinstance(value, str):
            lit = literal(value)
            if lit is NOT_LITERAL:
                ops.check_names(value, tbl.schema, tbl.name, what)
                out[name] = ops.spark_condition(spark, value, what)
                continue
            value = lit
        out[name] = typed_literal(tbl, field, value, what)
    return out


def literal(text: str) -> Any:
    """The Python value of a Spark SQL expression that is a plain literal (a
    number, a quoted string, NULL, TRUE/FALSE), else ``NOT_LITERAL``."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(text, read="spark")
    except sqlglot.errors.SqlglotError:
        return NOT_LITERAL
    neg = isinstance(tree, exp.Neg)
    if neg:
        tree = tree.this
    if isinstance(tree, exp.Literal):
        if tree.is_string:
            return NOT_LITERAL if neg else tree.this
        digits = ("-" if neg else "") + tree.this
        try:
            return int(digits)
        except ValueError:
            try:
                return Decimal(digits)
            except ArithmeticError:
                return NOT_LITERAL
    if neg:
        return NOT_LITERAL
    if isinstance(tree, exp.Null):
        return None
    if isinstance(tree, exp.Boolean):
        return bool(tree.this)
    return NOT_LITERAL


def typed_literal(tbl: ops.Table, field: pa.Field, value: Any, what: str) -> Column:
    """``value`` as a literal Column of ``field``'s type, checked here: it must
    convert to the type exactly (pyarrow's safe cast)."""
    if value is None:
        if not field.nullable:
            raise ValueError(f"bad {what}: column {field.name!r} of {tbl.name} is not nullable")
        return F.lit(None).cast(spark_type(field.type, field.name))
    try:
        arr = pa.array([value]).cast(field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as e:
        raise ValueError(
            f"bad {what}: {value!r} does not fit {field.type} (column {field.name!r} of "
            f"{tbl.name}): {str(e).splitlines()[0]}"
        ) from None
    exact = arr[0].as_py()
    return F.lit(exact).cast(spark_type(field.type, field.name))


def _new_rows(
    tbl: ops.Table, matched: DataFrame, exprs: dict[str, Column], values: Mapping[str, Any]
) -> DataFrame:
    """The matched rows' new versions in the table's columns, with ``_lh_file`` and
    ``_lh_row``: analysed on the driver (a bad expression or a result type that
    cannot be cast safely: ValueError), casts and not-null checks (in the job) as a
    write's."""
    names = tbl.schema.names
    new_cols = [exprs[n].alias(n) if n in exprs else col(n) for n in names]
    try:
        new = ops.analysed(
            matched, lambda f: f.select(*new_cols, FILE_COL, ROW_COL), dict(values), "values"
        )
    except ValueError as exc:  # name the value Spark could not analyse
        for n, e in exprs.items():
            what = f"value for column {n!r}"
            ops.analysed(matched, lambda f, e=e: f.select(e), values[n], what)
        raise exc from None
    for n in exprs:  # the result's type as a DataFrame column's (match_columns' rules)
        field = tbl.schema.field(n)
        try:
            match_columns(T.StructType([new.schema[n]]), pa.schema([field]), tbl.name)
        except ValueError:
            got, want = new.schema[n].dataType.simpleString(), spark_type(field.type, n)
            raise ValueError(
                f"bad value for column {n!r} of {tbl.name}: {values[n]!r} is {got}, which "
                f"cannot be cast safely to {want.simpleString()} ({field.type}); cast it "
                f"(CAST(... AS {want.simpleString()})) if its values fit"
            ) from None
    plans = match_columns(T.StructType([new.schema[n] for n in names]), tbl.schema, tbl.name)
    plans += [
        ColumnPlan(FILE_COL, T.StringType(), "keep"),
        ColumnPlan(ROW_COL, T.LongType(), "keep"),
    ]
    return prepare(new, plans, tbl.name)
