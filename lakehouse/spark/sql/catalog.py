"""``SHOW``, ``DESCRIBE`` and ``CALL system.*``: the lakehouse's catalog and
maintenance calls as Spark SQL statements, answered with Spark's column names
(``CALL`` is :mod:`~lakehouse.spark.sql.procedures`', re-exported here).

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
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlglot
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from sqlglot import exp

from lakehouse.spark.sql.context import Context
from lakehouse.spark.sql.names import CATALOG, table_name, unsupported
from lakehouse.spark.sql.procedures import call as call
from lakehouse.spark.sql.words import Words
from lakehouse.spark.types import spark_type

_S = T.StringType()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAMESPACE_WORDS = ("NAMESPACES", "SCHEMAS", "DATABASES")

#: DataOp -> the operation name Delta's DESCRIBE HISTORY uses for it
_OPERATION = {
    "create": "CREATE TABLE",
    "drop": "DROP TABLE",
    "alter": "ALTER TABLE",
    "append": "WRITE",
    "overwrite": "WRITE",
    "delete": "DELETE",
    "update": "UPDATE",
    "merge": "MERGE",
    "compact": "OPTIMIZE",
    "restore": "RESTORE",
}

HISTORY_SCHEMA = T.StructType(
    [
        T.StructField("version", T.LongType(), False),
        T.StructField("timestamp", T.TimestampType(), False),
        T.StructField("operation", _S, False),
        T.StructField("operationParameters", T.MapType(_S, _S), True),
        T.StructField("isolationLevel", _S, True),
    ]
)


def _frame(
    ctx: Context, columns: Sequence[str | T.StructField], rows: list[tuple[Any, ...]]
) -> DataFrame:
    fields = [c if isinstance(c, T.StructField) else T.StructField(c, _S, True) for c in columns]
    return local_frame(ctx, T.StructType(fields), rows)


def local_frame(ctx: Context, schema: T.StructType, rows: list[tuple[Any, ...]]) -> DataFrame:
    """``rows`` as a DataFrame of ``schema`` that Spark holds as a local relation: a
    SQL ``VALUES`` of literals, which Spark's driver answers without a job (a
    DataFrame created from Python objects costs a job each time it is fetched).
    Values: None, str, bool, int, an aware datetime (timestamp) and dict[str, str]."""
    names = ", ".join(_quote_any(f.name) for f in schema)
    if not rows:
        cols = ", ".join(
            f"CAST(NULL AS {f.dataType.simpleString()}) AS {_quote_any(f.name)}" for f in schema
        )
        return ctx.spark.sql(f"SELECT {cols} WHERE FALSE")
    values = ", ".join(
        "(" + ", ".join(_sql_value(v, f.dataType) for v, f in zip(row, schema)) + ")"
        for row in rows
    )
    return ctx.spark.sql(f"SELECT * FROM VALUES {values} AS v({names})")


def _quote_any(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _sql_value(v: Any, dt: T.DataType) -> str:
    """A Spark SQL literal of ``v``, cast to ``dt``."""
    to = dt.simpleString()
    if v is None:
        return f"CAST(NULL AS {to})"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return f"CAST({v} AS {to})"
    if isinstance(v, str):
        return _literal(v)
    if isinstance(v, datetime):
        micros = (v - _EPOCH) // timedelta(microseconds=1)
        return f"timestamp_micros({micros})"
    if isinstance(v, dict):
        if not v:
            return f"CAST(map() AS {to})"
        inner = ", ".join(f"{_literal(str(k))}, {_literal(str(x))}" for k, x in v.items())
        return f"map({inner})"
    raise TypeError(f"no SQL literal for a result value of type {type(v).__name__}")


def _to_spark(ctx: Context, tree: exp.Expression) -> DataFrame:
    from lakehouse.spark.sql.context import to_spark

    return to_spark(ctx, tree)


def _rest(tree: exp.Command) -> str:
    e = tree.expression
    return str(e.name) if isinstance(e, exp.Expression) else str(e or "")


def _namespace(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[1:]) if len(parts) == 2 and parts[0].lower() == CATALOG else name


def _table(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[1:]) if len(parts) == 3 and parts[0].lower() == CATALOG else name


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
    w = Words(_rest(tree), "SHOW")
    reads = ctx.reads
    if any(w.accept(k) for k in _NAMESPACE_WORDS):
        pattern = _pattern(w)
        w.end()
        return _frame(ctx, ["namespace"], [(n,) for n in like(pattern, reads.list_namespaces())])
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
            return _frame(ctx, cols, rows)
    if w.accept("TBLPROPERTIES"):
        name = _table(w.name())
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
        return _frame(ctx, ["key", "value"], list(pairs))
    if w.accept("COLUMNS"):
        if not (w.accept("IN") or w.accept("FROM")):
            raise w.error("IN or FROM")
        name = _table(w.name())
        if w.accept("IN") or w.accept("FROM"):
            name = f"{_namespace(w.name())}.{name}"
        w.end()
        if _object(ctx, name) is None:
            return _to_spark(ctx, tree)
        return _frame(ctx, ["col_name"], [(f.name,) for f in _schema_of(ctx, name)])
    if w.accept("CREATE", "TABLE"):
        name = _table(w.name())
        w.accept("AS", "SERDE")
        w.end()
        if _object(ctx, name) is None:
            return _to_spark(ctx, tree)
        return _frame(ctx, ["createtab_stmt"], [(create_statement(ctx, name),)])
    if w.accept("PARTITIONS"):
        name = _table(w.name())
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
            f"{_quote(f.name)}: {sql_type(f.dataType)}{'' if f.nullable else ' NOT NULL'}"
            for f in dt
        )
        return f"STRUCT<{inner}>"
    return str(dt.simpleString()).upper()


def _quote(name: str) -> str:
    return (
        name
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)
        else "`" + name.replace("`", "``") + "`"
    )


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


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
                + ",\n  ".join(f"{_literal(k)} = {_literal(v)}" for k, v in sorted(props.items()))
                + ")"
            )
        return f"{text}\nAS {view.sql}"
    d = ctx.reads.describe_table(name)
    cols = []
    for f in _schema_of(ctx, name):
        line = f"  {_quote(f.name)} {sql_type(f.dataType)}"
        if not f.nullable:
            line += " NOT NULL"
        if f.metadata.get("comment") is not None:
            line += f" COMMENT {_literal(f.metadata['comment'])}"
        cols.append(line)
    if d.primary_key:
        cols.append(f"  PRIMARY KEY ({', '.join(_quote(k) for k in d.primary_key)})")
    text = f"CREATE TABLE {name} (\n" + ",\n".join(cols) + ")"
    if d.partition_by:
        text += f"\nPARTITIONED BY ({', '.join(d.partition_by)})"
    props = dict(d.properties)
    if props:
        items = ",\n  ".join(f"{_literal(k)} = {_literal(v)}" for k, v in sorted(props.items()))
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
        return _frame(ctx, ["info_name", "info_value"], rows)
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
    return _frame(ctx, ["col_name", "data_type", "comment"], rows + list(details))


def history(ctx: Context, name: str) -> DataFrame:
    """One row per committed version that changed table ``name``, newest first, back
    to the version that created it (an earlier table of that name is not its history)."""
    ctx.reads.describe_table(name)  # NotFound names it
    rows: list[tuple[Any, ...]] = []
    for v in ctx.lh.history():
        ops = [str(c.op) for c in v.changes if c.kind == "table" and c.name == name]
        if not ops:
            continue
        operation, params = _operation(ops, v.rollback_of)
        if operation == "ALTER TABLE":
            operation, params = _alteration(ctx.lh, name, v.version)
        rows.append((v.version, v.created_at, operation, params, str(v.isolation.value).upper()))
        if "create" in ops:
            break
    return local_frame(ctx, HISTORY_SCHEMA, rows)


def _alteration(lh: Any, name: str, version: int) -> tuple[str, dict[str, str]]:
    """What an ``alter`` of table ``name`` at ``version`` changed, in Delta's words
    (``ADD COLUMNS``, ``DROP COLUMNS``, ``RENAME COLUMN``, ``CHANGE COLUMN``, ``SET
    TBLPROPERTIES``, ``UNSET TBLPROPERTIES``), from its definitions before and
    after; ``ALTER TABLE`` when that is something else or the version before
    has expired."""
    from lakehouse.errors import LakehouseError

    try:
        with lh.at_version(version - 1) as view:
            before = view.describe_table(name)
        with lh.at_version(version) as view:
            after = view.describe_table(name)
    except LakehouseError:
        return "ALTER TABLE", {}
    old = {c.id: c for c in before.columns}
    new = {c.id: c for c in after.columns}
    old_fields = {f.name: f for f in before.schema}
    new_fields = {f.name: f for f in after.schema}
    added = [new[i].name for i in new if i not in old]
    dropped = [old[i].name for i in old if i not in new]
    renamed = [
        f"{old[i].name} -> {new[i].name}" for i in new if i in old and old[i].name != new[i].name
    ]
    changed = [
        new[i].name
        for i in new
        if i in old
        and not old_fields[old[i].name].equals(new_fields[new[i].name], check_metadata=True)
        and old[i].name == new[i].name
    ]
    props_before, props_after = dict(before.properties), dict(after.properties)
    set_keys = sorted(k for k, v in props_after.items() if props_before.get(k) != v)
    unset_keys = sorted(k for k in props_before if k not in props_after)
    for operation, key, found in (
        ("ADD COLUMNS", "columns", added),
        ("DROP COLUMNS", "columns", dropped),
        ("RENAME COLUMN", "columns", renamed),
        ("CHANGE COLUMN", "columns", changed),
        ("SET TBLPROPERTIES", "properties", set_keys),
        ("UNSET TBLPROPERTIES", "properties", unset_keys),
    ):
        if found:
            return operation, {key: ", ".join(found)}
    return "ALTER TABLE", {}


def _operation(ops: list[str], rollback_of: int | None) -> tuple[str, dict[str, str]]:
    """Delta's operation name for a version's changes of one table, with its parameters."""
    if rollback_of is not None:
        return "RESTORE", {"version": str(rollback_of)}
    if "create" in ops and any(o in ("append", "overwrite") for o in ops):
        return "CREATE TABLE AS SELECT", {}
    names = list(dict.fromkeys(_OPERATION.get(o, o.upper()) for o in ops))
    params: dict[str, str] = {}
    if names == ["WRITE"]:
        params["mode"] = "Overwrite" if "overwrite" in ops else "Append"
    return ", ".join(names), params
