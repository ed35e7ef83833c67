"""``CREATE`` / ``DROP`` / ``ALTER`` in lakehouse SQL: definitions through the
lakehouse's transactions.

Runs on the driver. Each handler first turns the parsed statement into the
arguments of a lakehouse call (``create_namespace``, ``create_table``,
``create_view``, ``drop_*``, ``alter_table``...), refusing anything the
lakehouse does not have (``USING delta``, ``LOCATION``, bucketing...) with
the ValueError of :func:`~lakehouse.spark.sql.names.unsupported`, and only
then writes, in ``ctx.writing()`` (the session's transaction, or one of its
own). So a refused statement has written nothing.

Which statements are the lakehouse's: a two-part name ``ns.x`` (or
``lakehouse.ns.x``) whose namespace is a lakehouse namespace, or is not a
Spark database either (then the lakehouse's NotFound names it). One-part
names, other catalogs' names, temporary views over no lakehouse object and
names in a Spark database go to ``spark.sql`` unchanged. ``CREATE
NAMESPACE`` always creates a lakehouse namespace.

Column types are Spark's, mapped to Arrow exactly as ``lakehouse.spark.write``
maps a DataFrame's (:func:`lakehouse.spark.types.arrow_type`): ``BIGINT`` ->
int64, ``TIMESTAMP`` -> timestamp[us, UTC], ``TIMESTAMP_NTZ`` ->
timestamp[us], ``VARCHAR(n)``/``CHAR(n)`` -> string, ... so a table created
here and a DataFrame written into it agree. A column ``COMMENT`` is kept in
the Arrow field's metadata under ``comment`` (Spark's key).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from sqlglot import exp

from lakehouse.spark.jobs import first_line
from lakehouse.spark.sql.clauses import (
    ColumnSpec,
    clauses,
    column_spec,
    has_clause,
    query_field,
    set_properties,
    spark_type_of,
)
from lakehouse.spark.sql.context import Context
from lakehouse.spark.sql.names import CATALOG, table_name, unsupported
from lakehouse.spark.sql.words import Words
from lakehouse.spark.types import arrow_type

_NAMESPACE_KINDS = ("NAMESPACE", "SCHEMA", "DATABASE")


# -- names: whose object is it ----------------------------------------------------------------
def _name_of(node: exp.Expression) -> str:
    """The name of the object a CREATE/DROP/ALTER names (``ns.t``)."""
    t = node.this if isinstance(node, exp.Schema) else node
    if not isinstance(t, exp.Table):
        raise ValueError(f"expected a name, found {node.sql(dialect='spark')!r}")
    return table_name(t)


def _parts_of(node: exp.Expression) -> list[str]:
    """The parts of the name a CREATE/DROP/ALTER names (``lakehouse.`` stripped)."""
    t = node.this if isinstance(node, exp.Schema) else node
    parts = [str(p.name) for p in t.parts] if isinstance(t, exp.Table) else []
    return parts[1:] if len(parts) == 3 and parts[0].lower() == CATALOG else parts


def _is_lakehouse(ctx: Context, parts: list[str]) -> bool:
    """Whether a name (its parts: ``["ns", "x"]``; ``x`` may hold dots) is for the
    lakehouse (see the module doc)."""
    if len(parts) != 2:
        return False
    if ctx.reads.namespace_exists(parts[0]):
        return True
    return not ctx.spark.catalog.databaseExists(parts[0])


def _to_spark(ctx: Context, tree: exp.Expression) -> DataFrame:
    from lakehouse.spark.sql.context import to_spark

    return to_spark(ctx, tree)


def _names_lakehouse_object(ctx: Context, query: exp.Expression) -> bool:
    return any(
        ctx.is_table(n) or ctx.is_view(n)
        for n in (table_name(t) for t in query.find_all(exp.Table))
    )


def analysed(ctx: Context, query: Any) -> DataFrame:
    """The query's DataFrame, analysed (its schema known; no job runs); an analysis
    error (unknown column, bad type) is a ValueError naming the query."""
    from lakehouse.spark.jobs import is_analysis_error
    from lakehouse.spark.ops import quiet_analysis
    from lakehouse.spark.sql.query import frame_of

    try:
        with quiet_analysis():
            df = frame_of(ctx, query)
            _ = df.schema
        return df
    except Exception as exc:
        if not is_analysis_error(exc):
            raise
        first = first_line(exc)
        raise ValueError(f"bad query {query.sql(dialect='spark')!r}: {first[:400]}") from None


# -- CREATE -----------------------------------------------------------------------------------
def create(ctx: Context, tree: exp.Create) -> DataFrame:
    """``CREATE NAMESPACE | TABLE [AS SELECT] | VIEW``; an empty DataFrame."""
    kind = str(tree.args.get("kind") or "").upper()
    if kind in _NAMESPACE_KINDS:
        return _create_namespace(ctx, tree)
    if kind == "TABLE":
        return _create_table(ctx, tree)
    if kind == "VIEW":
        return _create_view(ctx, tree)
    raise unsupported(f"CREATE {kind}")


def _create_namespace(ctx: Context, tree: exp.Create) -> DataFrame:
    name = _name_of(tree.this)
    opts = clauses(tree, "namespace")
    if opts.partition_by is not None or opts.temporary or tree.args.get("replace"):
        raise unsupported(f"{tree.sql(dialect='spark')}")
    with ctx.writing() as t:
        t.create_namespace(name, opts.properties, if_not_exists=bool(tree.args.get("exists")))
    return ctx.empty()


def _create_table(ctx: Context, tree: exp.Create) -> DataFrame:
    name = _name_of(tree.this)
    if not _is_lakehouse(ctx, _parts_of(tree.this)):
        return _to_spark(ctx, tree)
    opts = clauses(tree, "table")
    if opts.temporary:
        raise unsupported("CREATE TEMPORARY TABLE", "create a temporary view of a query instead")
    replace, if_not_exists = bool(tree.args.get("replace")), bool(tree.args.get("exists"))
    query = tree.args.get("expression")
    columns: list[ColumnSpec] = []
    primary_key: list[str] = []
    if isinstance(tree.this, exp.Schema):
        for e in tree.this.expressions:
            if isinstance(e, exp.ColumnDef):
                columns.append(column_spec(e))
            elif isinstance(e, exp.PrimaryKey) or (
                isinstance(e, exp.Constraint)
                and all(isinstance(x, exp.PrimaryKey) for x in e.expressions)
            ):
                keys = (
                    e.expressions if isinstance(e, exp.PrimaryKey) else e.expressions[0].expressions
                )
                primary_key += [k.name for k in keys]
            elif query is not None and isinstance(e, exp.Identifier):
                raise unsupported(
                    "a column list in CREATE TABLE ... AS SELECT", "alias the query's columns"
                )
            else:
                raise unsupported(f"{e.sql(dialect='spark')} in CREATE TABLE")
        if query is not None:
            raise unsupported("column types in CREATE TABLE ... AS SELECT", "cast in the query")
    elif query is None:
        raise ValueError(f"CREATE TABLE {name} needs a column list or AS SELECT")
    for c in columns:
        if c.position is not None:
            raise unsupported(f"a column position in CREATE TABLE (column {c.name!r})")
    primary_key += [c.name for c in columns if c.primary_key]
    layout: dict[str, Any] = {"partition_by": opts.partition_by}
    if primary_key:
        layout["primary_key"] = primary_key
    if query is None:
        schema = pa.schema([c.arrow() for c in columns])
        with ctx.writing() as t:
            if replace and t.table_exists(name):
                t.drop_table(name)
            t.create_table(name, schema, opts.properties, if_not_exists=if_not_exists, **layout)
        return ctx.empty()
    if if_not_exists and ctx.reads.table_exists(name):
        return ctx.empty()  # as Spark: the query is not run
    from lakehouse.spark.ops import write

    df = analysed(ctx, query)
    schema = pa.schema([query_field(f) for f in df.schema.fields])
    with ctx.writing() as t:
        if replace and t.table_exists(name):
            t.drop_table(name)
        t.create_table(name, schema, opts.properties, **layout)
        write(ctx.lh, df, name, txn=t)
    return ctx.empty()


def _create_view(ctx: Context, tree: exp.Create) -> DataFrame:
    name = _name_of(tree.this)
    query = tree.args["expression"]
    temporary = has_clause(tree, exp.TemporaryProperty)
    if temporary or not _is_lakehouse(ctx, _parts_of(tree.this)):
        if not _names_lakehouse_object(ctx, query):
            return _to_spark(ctx, tree)
        if ctx.txn is not None and temporary:
            # the view would outlive the transaction in the Spark session: its
            # uncommitted rows seen by everyone, its files gone after ROLLBACK
            raise unsupported(
                "a temporary view over lakehouse tables inside a transaction",
                "create it after COMMIT",
            )
        if isinstance(tree.this, exp.Schema) or tree.args.get("exists"):
            raise unsupported(
                "a column list or IF NOT EXISTS in a temporary view of lakehouse tables"
            )
        if not temporary:
            raise unsupported(
                f"a Spark view {name} of lakehouse tables", "make it a TEMPORARY view"
            )
        df = analysed(ctx, query)
        how = "createOrReplace" if tree.args.get("replace") else "create"
        how += "GlobalTempView" if has_clause(tree, exp.GlobalProperty) else "TempView"
        from lakehouse.spark.jobs import is_analysis_error
        from lakehouse.spark.ops import quiet_analysis

        try:
            with quiet_analysis():
                getattr(df, how)(name)
        except Exception as exc:
            if not is_analysis_error(exc):
                raise
            first = first_line(exc)
            raise ValueError(f"temporary view {name}: {first[:300]}") from None
        return ctx.empty()
    opts = clauses(tree, "view")
    if isinstance(tree.this, exp.Schema):
        raise unsupported("a column list in CREATE VIEW", "alias the query's columns")
    if opts.partition_by is not None:
        raise unsupported("PARTITIONED BY in CREATE VIEW")
    analysed(ctx, query)  # the query analyses (no job runs)
    referenced = sorted(
        {
            n
            for n in (table_name(t) for t in query.find_all(exp.Table))
            if ctx.is_table(n) or ctx.is_view(n)
        }
    )
    sql = query.sql(dialect="spark")
    with ctx.writing() as t:
        if t.view_exists(name):
            if tree.args.get("exists"):
                return ctx.empty()
            if tree.args.get("replace"):
                t.drop_view(name)
        t.create_view(name, sql, opts.properties, referenced=referenced)
    return ctx.empty()


# -- DROP -------------------------------------------------------------------------------------
def drop(ctx: Context, tree: exp.Drop) -> DataFrame:
    """``DROP TABLE | VIEW | NAMESPACE [IF EXISTS]`` (a namespace with ``CASCADE``:
    its tables and views too, in the same version)."""
    kind = str(tree.args.get("kind") or "").upper()
    targets = tree.args.get("tables") or []
    if len(targets) != 1:
        raise unsupported(f"DROP {kind} of {len(targets)} objects")
    name = _name_of(targets[0])
    if_exists = bool(tree.args.get("exists"))
    if kind in _NAMESPACE_KINDS:
        if not ctx.reads.namespace_exists(name) and ctx.spark.catalog.databaseExists(name):
            return _to_spark(ctx, tree)
        with ctx.writing() as t:
            if if_exists and not t.namespace_exists(name):
                return ctx.empty()
            if tree.args.get("cascade"):
                for v in t.list_views(name):
                    t.drop_view(f"{name}.{v}")
                for tb in t.list_tables(name):
                    t.drop_table(f"{name}.{tb}")
            t.drop_namespace(name)
        return ctx.empty()
    if kind not in ("TABLE", "VIEW"):
        raise unsupported(f"DROP {kind}")
    if tree.args.get("temporary") or not _is_lakehouse(ctx, _parts_of(targets[0])):
        return _to_spark(ctx, tree)
    if tree.args.get("purge"):
        raise unsupported("DROP TABLE ... PURGE", "data files are deleted when versions expire")
    with ctx.writing() as t:
        exists = t.table_exists(name) if kind == "TABLE" else t.view_exists(name)
        if exists or not if_exists:
            t.drop_table(name) if kind == "TABLE" else t.drop_view(name)
    return ctx.empty()


# -- ALTER ------------------------------------------------------------------------------------
def alter(ctx: Context, tree: exp.Alter) -> DataFrame:
    """``ALTER TABLE ns.t ADD COLUMN(S) | DROP COLUMN(S) | RENAME COLUMN | ALTER COLUMN
    | SET TBLPROPERTIES`` and ``ALTER VIEW ns.v AS SELECT | SET TBLPROPERTIES``."""
    kind = str(tree.args.get("kind") or "").upper()
    name = _name_of(tree.this)
    if not _is_lakehouse(ctx, _parts_of(tree.this)):
        return _to_spark(ctx, tree)
    actions = tree.args.get("actions") or []
    if kind == "VIEW":
        return _alter_view(ctx, name, actions)
    if kind != "TABLE":
        raise unsupported(f"ALTER {kind}")
    steps = [_table_step(a) for a in actions]  # refused actions raise before anything is written
    with ctx.writing() as t:
        if tree.args.get("exists") and not t.table_exists(name):
            return ctx.empty()
        for step in steps:
            step(t, name)
    return ctx.empty()


def _alter_view(ctx: Context, name: str, actions: list[exp.Expression]) -> DataFrame:
    if len(actions) != 1:
        raise unsupported("ALTER VIEW with several actions")
    action = actions[0]
    if isinstance(action, exp.AlterSet) and set_properties(action) is not None:
        with ctx.writing() as t:
            t.alter_view(name, set_properties=set_properties(action))
        return ctx.empty()
    if isinstance(action, exp.Query):
        analysed(ctx, action)  # the query analyses (no job runs)
        with ctx.writing() as t:
            t.alter_view(name, sql=action.sql(dialect="spark"))
        return ctx.empty()
    raise unsupported(f"ALTER VIEW ... {action.sql(dialect='spark')}")


def _current(t: Any, name: str) -> pa.Schema:
    return t.describe_table(name).schema


def _table_step(action: exp.Expression) -> Any:
    """One ALTER TABLE action as ``step(txn, name)``; unsupported ones raise now."""
    if isinstance(action, exp.ColumnDef) or (
        isinstance(action, exp.Schema)
        and all(isinstance(c, exp.ColumnDef) for c in action.expressions)
    ):
        cols = [
            column_spec(c)
            for c in (action.expressions if isinstance(action, exp.Schema) else [action])
        ]
        for c in cols:
            if not c.nullable:
                raise unsupported(
                    f"ADD COLUMN {c.name} ... NOT NULL", "existing rows have no value for it"
                )
            if c.primary_key:
                raise unsupported(f"ADD COLUMN {c.name} ... PRIMARY KEY")
        return lambda t, name: t.alter_table(name, schema=_added(_current(t, name), cols))
    if isinstance(action, exp.RenameColumn):
        old, new = action.this.name, action.args["to"].name
        return lambda t, name: t.alter_table(name, rename_columns={old: new})
    if isinstance(action, exp.Drop) and str(action.args.get("kind")).upper() in (
        "COLUMN",
        "COLUMNS",
    ):
        gone = [
            n.name
            for x in action.args.get("tables") or []
            for n in (x.expressions if isinstance(x, exp.Schema) else [x])
        ]
        if_exists = bool(action.args.get("exists"))
        return lambda t, name: t.alter_table(
            name, schema=_dropped(_current(t, name), gone, if_exists, name)
        )
    if isinstance(action, exp.AlterSet):
        props = set_properties(action)
        if props is None:
            raise unsupported(f"ALTER TABLE ... {action.sql(dialect='spark')}")
        return lambda t, name: t.alter_table(name, set_properties=props)
    if isinstance(action, exp.AlterColumn):
        return _altercolumn_spec(action)
    if isinstance(action, exp.AlterRename):
        raise unsupported("ALTER TABLE ... RENAME TO", "lakehouse tables cannot be renamed")
    raise unsupported(f"ALTER TABLE ... {action.sql(dialect='spark')}")


def _added(schema: pa.Schema, cols: list[ColumnSpec]) -> pa.Schema:
    fields = list(schema)
    for c in cols:
        pos = c.position
        if pos is None:
            fields.append(c.arrow())
        elif str(pos.args.get("position")).upper() == "FIRST":
            fields.insert(0, c.arrow())
        else:
            after = pos.this.name
            idx = [f.name for f in fields].index(after) if after in [f.name for f in fields] else -1
            if idx < 0:
                raise ValueError(f"ADD COLUMN {c.name} AFTER {after}: no column {after!r}")
            fields.insert(idx + 1, c.arrow())
    return pa.schema(fields, metadata=schema.metadata)


def _dropped(schema: pa.Schema, gone: list[str], if_exists: bool, table: str) -> pa.Schema:
    missing = [g for g in gone if g not in schema.names]
    if missing and not if_exists:
        raise ValueError(f"DROP COLUMN: {table} has no column {missing[0]!r}")
    return pa.schema([f for f in schema if f.name not in gone], metadata=schema.metadata)


def _altercolumn_spec(action: exp.AlterColumn) -> Any:
    col = action.this.name
    a = action.args
    rename = a.get("rename_to")
    dtype = a.get("dtype")
    comment = a.get("comment")
    if a.get("allow_null") is False:
        raise unsupported(f"ALTER COLUMN {col} SET NOT NULL", "existing rows are not checked")
    if a.get("default") is not None or (a.get("drop") and a.get("allow_null") is not True):
        raise unsupported(f"ALTER TABLE ... {action.sql(dialect='spark')}")
    new_type = spark_type_of(dtype, col) if dtype is not None else None
    note = comment.name if isinstance(comment, exp.Expression) else None

    def step(t: Any, name: str) -> None:
        schema = _current(t, name)
        if col not in schema.names:
            raise ValueError(f"ALTER COLUMN: {name} has no column {col!r}")
        fields = []
        for f in schema:
            if f.name == col:
                if new_type is not None:
                    f = f.with_type(arrow_type(new_type))
                if a.get("allow_null") is True:
                    f = f.with_nullable(True)
                if note is not None:
                    f = f.with_metadata({**(f.metadata or {}), b"comment": note.encode()})
            fields.append(f)
        t.alter_table(name, schema=pa.schema(fields, metadata=schema.metadata))
        if isinstance(rename, exp.Expression) and rename.name != col:
            t.alter_table(name, rename_columns={col: rename.name})

    return step


# -- statements sqlglot leaves as a Command ---------------------------------------------------
def command(ctx: Context, tree: exp.Command) -> DataFrame:
    """``CREATE NAMESPACE ... WITH DBPROPERTIES (...)``, ``ALTER NAMESPACE ns SET
    DBPROPERTIES (...)``, ``ALTER TABLE|VIEW ns.x UNSET TBLPROPERTIES [IF EXISTS]
    (...)``; other CREATE/ALTER commands naming no lakehouse object go to Spark."""
    verb = str(tree.this).upper()
    rest = (
        tree.expression.name
        if isinstance(tree.expression, exp.Expression)
        else str(tree.expression)
    )
    w = Words(rest, f"{verb} statement")
    if verb == "CREATE" and any(w.accept(k) for k in _NAMESPACE_KINDS):
        if_not_exists = w.accept("IF", "NOT", "EXISTS")
        name = w.name()
        props: dict[str, str] = {}
        while not w.at_end():
            if w.accept("COMMENT"):
                props["comment"] = w.string()
            elif w.accept("WITH", "DBPROPERTIES") or w.accept("WITH", "PROPERTIES"):
                props.update(w.properties())
            elif w.accept("LOCATION"):
                raise unsupported("LOCATION", "the lakehouse places its data files itself")
            else:
                raise w.error("COMMENT, WITH DBPROPERTIES or the end")
        with ctx.writing() as t:
            t.create_namespace(name, props, if_not_exists=if_not_exists)
        return ctx.empty()
    if verb == "ALTER" and any(w.accept(k) for k in _NAMESPACE_KINDS):
        name = w.name()
        if w.accept("SET", "DBPROPERTIES") or w.accept("SET", "PROPERTIES"):
            props = w.properties()
            w.end()
            with ctx.writing() as t:
                t.alter_namespace(name, set_properties=props)
            return ctx.empty()
        raise unsupported(f"ALTER NAMESPACE {name} {w.rest()}")
    if verb == "ALTER" and (w.accept("TABLE") or w.accept("VIEW")):
        kind = w.tokens[w.i - 1].text.upper()
        parts = w.name_parts()
        if len(parts) == 3 and parts[0].lower() == CATALOG:
            parts = parts[1:]
        name = ".".join(parts)
        if w.accept("UNSET", "TBLPROPERTIES"):
            if_exists = w.accept("IF", "EXISTS")
            keys = w.keys()
            w.end()
            if not _is_lakehouse(ctx, parts):
                return _to_spark(ctx, tree)
            with ctx.writing() as t:
                cur = t.describe_table(name) if kind == "TABLE" else t.describe_view(name)
                missing = [k for k in keys if k not in cur.properties]
                if missing and not if_exists:
                    raise ValueError(
                        f"{name} has no property {missing[0]!r} (use UNSET TBLPROPERTIES IF EXISTS)"
                    )
                drop = [k for k in keys if k in cur.properties]
                if kind == "TABLE":
                    t.alter_table(name, remove_properties=drop)
                else:
                    t.alter_view(name, remove_properties=drop)
            return ctx.empty()
        if _is_lakehouse(ctx, parts):
            raise unsupported(f"ALTER {kind} {name} {w.rest()}")
    return _to_spark(ctx, tree)
