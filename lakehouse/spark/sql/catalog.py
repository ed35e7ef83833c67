"""``SHOW``, ``DESCRIBE`` and ``CALL system.*``: the lakehouse's catalog and
maintenance calls as Spark SQL statements, answered with Spark's column names
(``CALL`` is :mod:`~lakehouse.spark.sql.procedures`', re-exported here;
``DESCRIBE HISTORY`` is :mod:`~lakehouse.spark.sql.history`'s; the result
frames and literals are :mod:`~lakehouse.spark.sql.values`').

Runs on the driver; no Spark job runs (results are small DataFrames built from
the lakehouse's metadata with explicit schemas, so they work under Spark
Connect too). Reads go to ``ctx.reads``: inside a transaction, its own
changes are seen.

=========================================  =====================================
statement                                  result columns
=========================================  =====================================
``SHOW NAMESPACES [LIKE 'p']``             ``namespace``
``SHOW TABLES [IN ns] [LIKE 'p']``         ``namespace, tableName, isTemporary``
``SHOW VIEWS [IN ns] [LIKE 'p']``          ``namespace, viewName, isTemporary``
``SHOW TBLPROPERTIES ns.t [('k')]``        ``key, value``
``SHOW COLUMNS IN ns.t``                   ``col_name``
``SHOW CREATE TABLE ns.t``                 ``createtab_stmt``
``DESCRIBE [TABLE] [EXTENDED] ns.t``       ``col_name, data_type, comment``
``DESCRIBE NAMESPACE ns``                  ``info_name, info_value``
``DESCRIBE HISTORY ns.t``                  ``version, timestamp, operation,
                                           operationParameters, isolationLevel``
``CALL system.rollback(version)``          ``version, restored_version``
``CALL system.compact('ns.t')``            ``files_removed, files_added, rows,
                                           bytes_before, bytes_after``
``CALL system.expire_versions(...)``       ``expired_versions, oldest_version``
=========================================  =====================================

``SHOW TABLES`` / ``SHOW VIEWS`` without ``IN`` list every lakehouse
namespace (Spark lists its current database; the lakehouse has none).
``LIKE`` patterns are Spark's: ``*`` any characters, ``|`` alternatives,
case-insensitive. A ``SHOW`` or ``DESCRIBE`` of something that is not the
lakehouse's (a Spark database, temp view, function...) goes to ``spark.sql``.
"""

from __future__ import annotations

import re
from typing import Any

import sqlglot
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from sqlglot import exp

from lakehouse.spark.sql.context import Context
from lakehouse.spark.sql.history import history
from lakehouse.spark.sql.names import (
    CATALOG,
    command_text,
    table_name,
    unsupported,
    without_catalog,
)
from lakehouse.spark.sql.procedures import call as call
from lakehouse.spark.sql.values import ddl_name, sql_string, text_frame
from lakehouse.spark.sql.words import Words
from lakehouse.spark.types import spark_type

_NAMESPACE_WORDS = ("NAMESPACES", "SCHEMAS", "DATABASES")


def _to_spark(ctx: Context, tree: exp.Expression) -> DataFrame:
    from lakehouse.spark.sql.context import to_spark

    return to_spark(ctx, tree)


def _namespace(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[1:]) if len(parts) == 2 and parts[0].lower() == CATALOG else name


def like(pattern: str | None, names: list[str]) -> list[str]:
    """``names`` matching a Spark ``LIKE`` pattern of ``SHOW`` (``*`` and ``|``,
    case-insensitive); all of them without a pattern."""
    if pattern is None:
        return names
    regexes = []
    for sub in pattern.strip().split("|"):
        try:
            regexes.append(re.compile(sub.strip().replace("*", ".*"), re.IGNORECASE))
        except re.error:
            continue  # as Spark: an invalid alternative matches nothing
    return [n for n in names if any(r.fullmatch(n) for r in regexes)]


def _pattern(w: Words) -> str | None:
    if w.accept("LIKE"):
        return w.string()
    if not w.at_end() and w.tokens[w.i].token_type.name == "STRING":
        return w.string()
    return None


# -- SHOW -------------------------------------------------------------------------------------
def show(ctx: Context, tree: exp.Command) -> DataFrame:
    """``SHOW NAMESPACES | TABLES | VIEWS | TBLPROPERTIES | COLUMNS | CREATE TABLE``."""
    w = Words(command_text(tree), "SHOW")
    reads = ctx.reads
    if any(w.accept(k) for k in _NAMESPACE_WORDS):
        pattern = _pattern(w)
        w.end()
        return text_frame(
            ctx, ["namespace"], [(n,) for n in like(pattern, reads.list_namespaces())]
        )
    for word, column, lister in (
        ("TABLES", "tableName", "list_tables"),
        ("VIEWS", "viewName", "list_views"),
    ):
        if w.accept(word):
            namespaces = reads.list_namespaces()
            if w.accept("IN") or w.accept("FROM"):
                ns = _namespace(w.name())
                if not reads.namespace_exists(ns) and ctx.spark.catalog.databaseExists(ns):
                    return _to_spark(ctx, tree)
                reads.describe_namespace(ns)  # NotFound names it
                namespaces = [ns]
            pattern = _pattern(w)
            w.end()
            rows: list[tuple[Any, ...]] = [
                (ns, n, False)
                for ns in namespaces
                for n in like(pattern, getattr(reads, lister)(ns))
            ]
            cols: list[str | T.StructField] = [
                "namespace",
                column,
                T.StructField("isTemporary", T.BooleanType(), False),
            ]
            return text_frame(ctx, cols, rows)
    if w.accept("TBLPROPERTIES"):
        name = without_catalog(w.name())
        keys = w.keys() if not w.at_end() else None
        w.end()
        obj = _object(ctx, name)
        if obj is None:
            return _to_spark(ctx, tree)
        props = obj.properties
        if keys is None:
            pairs = sorted(props.items())
        else:
            pairs = [(k, props.get(k, f"Table {name} does not have property: {k}")) for k in keys]
        return text_frame(ctx, ["key", "value"], list(pairs))
    if w.accept("COLUMNS"):
        if not (w.accept("IN") or w.accept("FROM")):
            raise w.error("IN or FROM")
        name = without_catalog(w.name())
        if w.accept("IN") or w.accept("FROM"):
            name = f"{_namespace(w.name())}.{name}"
        w.end()
        if _object(ctx, name) is None:
            return _to_spark(ctx, tree)
        return text_frame(ctx, ["col_name"], [(f.name,) for f in _schema_of(ctx, name)])
    if w.accept("CREATE", "TABLE"):
        name = without_catalog(w.name())
        w.accept("AS", "SERDE")
        w.end()
        if _object(ctx, name) is None:
            return _to_spark(ctx, tree)
        return text_frame(ctx, ["createtab_stmt"], [(create_statement(ctx, name),)])
    if w.accept("PARTITIONS"):
        name = without_catalog(w.name())
        if _object(ctx, name) is not None:
            raise unsupported(
                f"SHOW PARTITIONS {name}", "list_data_files() gives each file's partition"
            )
    return _to_spark(ctx, tree)


def _object(ctx: Context, name: str) -> Any:
    """The table or view definition ``name`` names, None when it is not the
    lakehouse's; NotFound when its namespace is a lakehouse one but it is not there."""
    if ctx.is_table(name):
        return ctx.reads.describe_table(name)
    if ctx.is_view(name):
        return ctx.reads.describe_view(name)
    parts = name.split(".", 1)  # a table name may hold dots: ns.`a.b`
    if len(parts) == 2 and ctx.reads.namespace_exists(parts[0]):
        return ctx.reads.describe_table(name)  # raises NotFound naming it
    return None


def _schema_of(ctx: Context, name: str) -> T.StructType:
    """A table's or view's columns as Spark types (a view's from analysing its query)."""
    if ctx.is_table(name):
        schema = ctx.reads.describe_table(name).schema
        return T.StructType(
            [
                T.StructField(
                    f.name,
                    spark_type(f.type, f.name),
                    f.nullable,
                    {"comment": f.metadata[b"comment"].decode()}
                    if f.metadata and b"comment" in f.metadata
                    else {},
                )
                for f in schema
            ]
        )
    from lakehouse.spark.sql.ddl import analysed

    sql = ctx.reads.describe_view(name).sql
    try:
        tree: Any = sqlglot.parse_one(sql, read="spark")
    except sqlglot.errors.SqlglotError as exc:
        raise ValueError(f"view {name} has SQL Spark cannot read: {exc}") from None
    return analysed(ctx, tree).schema


def sql_type(dt: T.DataType) -> str:
    """A Spark type as DDL spells it (``BIGINT``, ``DECIMAL(10,2)``, ``STRUCT<`x`: INT>``)."""
    if isinstance(dt, T.ArrayType):
        return f"ARRAY<{sql_type(dt.elementType)}>"
    if isinstance(dt, T.MapType):
        return f"MAP<{sql_type(dt.keyType)}, {sql_type(dt.valueType)}>"
    if isinstance(dt, T.StructType):
        inner = ", ".join(
            f"{ddl_name(f.name)}: {sql_type(f.dataType)}{'' if f.nullable else ' NOT NULL'}"
            for f in dt
        )
        return f"STRUCT<{inner}>"
    return str(dt.simpleString()).upper()


def create_statement(ctx: Context, name: str) -> str:
    """The ``CREATE TABLE`` (or ``CREATE VIEW``) statement that makes ``name`` again
    (sort keys, which SQL cannot spell, are left out)."""
    if not ctx.is_table(name):
        view = ctx.reads.describe_view(name)
        props = dict(view.properties)
        text = f"CREATE VIEW {name}"
        if props:
            text += (
                "\nTBLPROPERTIES (\n  "
                + ",\n  ".join(
                    f"{sql_string(k)} = {sql_string(v)}" for k, v in sorted(props.items())
                )
                + ")"
            )
        return f"{text}\nAS {view.sql}"
    d = ctx.reads.describe_table(name)
    cols = []
    for f in _schema_of(ctx, name):
        line = f"  {ddl_name(f.name)} {sql_type(f.dataType)}"
        if not f.nullable:
            line += " NOT NULL"
        if f.metadata.get("comment") is not None:
            line += f" COMMENT {sql_string(f.metadata['comment'])}"
        cols.append(line)
    if d.primary_key:
        cols.append(f"  PRIMARY KEY ({', '.join(ddl_name(k) for k in d.primary_key)})")
    text = f"CREATE TABLE {name} (\n" + ",\n".join(cols) + ")"
    if d.partition_by:
        text += f"\nPARTITIONED BY ({', '.join(d.partition_by)})"
    props = dict(d.properties)
    if props:
        items = ",\n  ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in sorted(props.items()))
        text += f"\nTBLPROPERTIES (\n  {items})"
    return text


# -- DESCRIBE ---------------------------------------------------------------------------------
def describe(ctx: Context, tree: exp.Describe) -> DataFrame:
    """``DESCRIBE [TABLE] [EXTENDED|FORMATTED] ns.t``, ``DESCRIBE HISTORY ns.t``,
    ``DESCRIBE NAMESPACE ns``, ``DESCRIBE <query>``."""
    style = str(tree.args.get("style") or "").upper()
    kind = str(tree.args.get("kind") or "").upper()
    target = tree.this
    if isinstance(target, exp.Query):
        from lakehouse.spark.sql.ddl import analysed

        return _columns(ctx, analysed(ctx, target).schema, [])
    if not isinstance(target, exp.Table):
        return _to_spark(ctx, tree)
    name = table_name(target)
    if kind in ("NAMESPACE", "SCHEMA", "DATABASE"):
        ns = _namespace(name)
        if not ctx.reads.namespace_exists(ns) and ctx.spark.catalog.databaseExists(ns):
            return _to_spark(ctx, tree)
        d = ctx.reads.describe_namespace(ns)
        rows = [("Namespace Name", ns)]
        props = dict(d.properties)
        if "comment" in props:
            rows.append(("Comment", props["comment"]))
        if style == "EXTENDED":
            rows.append(("Properties", _props_text(props)))
        return text_frame(ctx, ["info_name", "info_value"], rows)
    if style == "HISTORY":
        return history(ctx, name)
    if _object(ctx, name) is None:
        return _to_spark(ctx, tree)
    extended = style in ("EXTENDED", "FORMATTED")
    details: list[tuple[str, str, str]] = []
    if ctx.is_table(name):
        d = ctx.reads.describe_table(name)
        if d.partition_by:
            details += [("", "", ""), ("# Partitioning", "", "")]
            details += [(f"Part {i}", p, "") for i, p in enumerate(d.partition_by)]
        if extended:
            details += [("", "", ""), ("# Detailed Table Information", "", ""), ("Name", name, "")]
            details += [("Type", "MANAGED", ""), ("Provider", "lakehouse", "")]
            if d.primary_key:
                details.append(("Primary Key", ", ".join(d.primary_key), ""))
            if d.sort_keys:
                details.append(("Sort Keys", ", ".join(d.sort_keys), ""))
            details.append(("Table Properties", _props_text(dict(d.properties)), ""))
    elif extended:
        v = ctx.reads.describe_view(name)
        details += [("", "", ""), ("# Detailed Table Information", "", ""), ("Name", name, "")]
        details += [("Type", "VIEW", ""), ("View Text", v.sql, "")]
        details.append(("Table Properties", _props_text(dict(v.properties)), ""))
    return _columns(ctx, _schema_of(ctx, name), details)


def _props_text(props: dict[str, str]) -> str:
    return "[" + ",".join(f"{k}={v}" for k, v in sorted(props.items())) + "]"


def _columns(ctx: Context, schema: T.StructType, details: list[tuple[str, str, str]]) -> DataFrame:
    rows: list[tuple[Any, ...]] = [
        (f.name, f.dataType.simpleString(), (f.metadata or {}).get("comment")) for f in schema
    ]
    return text_frame(ctx, ["col_name", "data_type", "comment"], rows + list(details))
