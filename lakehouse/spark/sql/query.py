"""Queries over lakehouse tables: the lakehouse references become DataFrames, Spark
runs the query.

:func:`frame_of` takes a parsed ``SELECT`` / ``VALUES`` / set operation (with
its CTEs and subqueries) and, on the driver:

1. finds every table reference naming a lakehouse table (``ns.t``, quoted or
   not, ``lakehouse.ns.t``) with its ``VERSION AS OF n`` / ``TIMESTAMP AS OF
   '...'`` (a timestamp without a zone is in the Spark session's time zone);
   CTE names are one part and never shadow a two-part lakehouse name;
2. expands a lakehouse view into its SQL as a subquery (recursively; a
   ``VERSION AS OF`` on the view applies to the tables it reads);
3. replaces each table reference by a ``{placeholder}`` for the DataFrame
   :func:`lakehouse.spark.read` gives for it (``txn=ctx.txn`` inside a
   transaction, so its own writes are seen and a SERIALIZABLE read is
   recorded; a reference with a version reads that version of the
   lakehouse). A reference without an alias gets the table's name as alias,
   so ``t.col`` and ``ns.t.col`` still resolve; when two of them share a name
   (``a.x JOIN b.x``), each gets an alias of its own and ``a.x.col`` /
   ``b.x.col`` resolve (``x.col`` is ambiguous, as in Spark);
4. for a query reading one lakehouse table, the simple conjuncts of its
   ``WHERE`` (comparisons, ``IN``, ``BETWEEN``, ``IS NULL`` of the table's
   columns with literals) are also given to ``read(where=)``, which prunes
   files by partition and column bounds before Spark plans the scan;
5. calls ``spark.sql(text, **frames)`` (user braces escaped), which works in
   classic Spark and under Spark Connect; executors read the files.

A query naming no lakehouse object is given to ``spark.sql`` as written. A
two-part name that is neither a lakehouse object nor a Spark table or view
raises ValueError before any job.
"""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from sqlglot import exp

from lakehouse.spark.jobs import first_line
from lakehouse.spark.ops import quiet_analysis, read
from lakehouse.spark.sql.context import Context
from lakehouse.spark.sql.names import CATALOG, table_name, unsupported
from lakehouse.spark.sqltext import canonical

#: nodes a pushed-down WHERE conjunct may hold (deterministic, evaluated the
#: same by Spark row by row; the read applies the conjunct, the query again)
_SIMPLE = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.In,
    exp.Between,
    exp.Is,
    exp.Not,
    exp.And,
    exp.Or,
    exp.Paren,
    exp.Neg,
    exp.Tuple,
    exp.Like,
    exp.Cast,
    exp.DataType,
    exp.DataTypeParam,
)

#: views expanded inside views: deeper than this is a cycle
_MAX_DEPTH = 32


@dataclass(frozen=True)
class At:
    """Which version a reference reads: the context's (``None``), a version
    number, or as of a timestamp (epoch ms)."""

    version: int | None = None
    timestamp_ms: int | None = None

    @property
    def latest(self) -> bool:
        return self.version is None and self.timestamp_ms is None


@dataclass
class _Rewrite:
    ctx: Context
    marker: str = field(default_factory=lambda: f"lhref{secrets.token_hex(6)}x")
    frames: dict[str, DataFrame] = field(default_factory=dict)
    keys: dict[tuple[str, At, str | None], str] = field(default_factory=dict)
    changed: bool = False
    aliases: int = 0

    def ident(self, ref: str) -> str:
        """The identifier standing for ``{ref}`` in the generated SQL (``_`` ends it,
        so no ident is a prefix of another)."""
        return f"{self.marker}{ref}_"

    def placeholder(self, name: str, at: At, where: str | None) -> str:
        key = (name, at, where)
        if key not in self.keys:
            ref = f"lh_{len(self.keys)}"
            self.keys[key] = ref
            self.frames[ref] = self.read(name, at, where)
        return self.keys[key]

    def read(self, name: str, at: At, where: str | None) -> DataFrame:
        ctx = self.ctx
        kw: dict[str, Any] = {}
        if at.version is not None:
            kw["version"] = at.version
        elif at.timestamp_ms is not None:
            kw["timestamp"] = at.timestamp_ms
        elif ctx.txn is not None:
            kw["txn"] = ctx.txn
        if where is not None:
            try:
                return read(ctx.lh, ctx.spark, name, where=where, **kw)
            except ValueError:  # not something read() takes: Spark filters every row
                pass
        return read(ctx.lh, ctx.spark, name, **kw)


def frame_of(ctx: Context, tree: exp.Expression, *, prefix: str = "") -> DataFrame:
    """The DataFrame of a query (see the module doc). Nothing is committed.
    ``prefix``: SQL put before the query (``"EXPLAIN "``)."""
    rw = _Rewrite(ctx)
    work = tree.copy()
    pushed = _pushable(ctx, work)
    work = _rewrite(rw, work, At(), pushed, depth=0)
    if not rw.changed:
        return _spark_sql(ctx, prefix + _text_of(tree), {}, _text_of(tree), rewritten=False)
    text = work.sql(dialect="spark").replace("{", "{{").replace("}", "}}")
    for ref in rw.frames:
        text = text.replace(rw.ident(ref), "{" + ref + "}")
    return _spark_sql(ctx, prefix + text, rw.frames, _text_of(tree), rewritten=True)


def _spark_sql(
    ctx: Context, text: str, frames: dict[str, DataFrame], shown: str, *, rewritten: bool
) -> DataFrame:
    """``spark.sql``; Spark's analysis errors of a rewritten query (and a missing
    table or view in any) become ValueError naming the query (Spark's error log
    of them silenced)."""
    from lakehouse.spark.jobs import is_analysis_error

    try:
        with quiet_analysis():
            return ctx.spark.sql(text, None, **frames) if frames else ctx.spark.sql(text)
    except Exception as exc:
        if not is_analysis_error(exc):
            raise
        condition = getattr(exc, "getCondition", getattr(exc, "getErrorClass", None))
        missing = callable(condition) and condition() == "TABLE_OR_VIEW_NOT_FOUND"
        if not rewritten and not missing:
            raise
        first = first_line(exc)
        raise ValueError(f"bad query {shown!r}: {first[:400]}") from None


def _text_of(tree: exp.Expression) -> str:
    text = tree.meta.get("sql")
    return text if isinstance(text, str) else tree.sql(dialect="spark")


def _rewrite(
    rw: _Rewrite,
    tree: exp.Expression,
    outer: At,
    pushed: tuple[exp.Table, str] | None,
    depth: int,
) -> exp.Expression:
    if depth > _MAX_DEPTH:
        raise ValueError("lakehouse views nest too deeply (a view that reads itself?)")
    ctx = rw.ctx
    aliases = _aliases(rw, tree)
    for node in list(tree.find_all(exp.Table)):
        if not isinstance(node.this, exp.Identifier):  # a table function: range(10), ...
            continue
        name = table_name(node)
        if len(node.parts) < 2:
            continue  # a temp view, a CTE or a Spark table of the current database
        at = _at(ctx, node, name, outer)
        if ctx.is_table(name):
            where = pushed[1] if pushed is not None and pushed[0] is node else None
            ref = rw.placeholder(name, at, where)
            if not node.alias:
                node.set("alias", _alias_of(node, aliases))
            node.set("catalog", None)
            node.set("db", None)
            node.set("version", None)
            node.set("this", exp.to_identifier(rw.ident(ref)))
            rw.changed = True
        elif ctx.is_view(name):
            body = _view_tree(ctx, name, at)
            body = _rewrite(rw, body, at, None, depth + 1)
            alias = node.args.get("alias")
            if not node.alias:
                alias = _alias_of(node, aliases)
            sub = exp.Subquery(this=body, alias=alias)
            if node is tree:
                return sub
            node.replace(sub)
            rw.changed = True
        elif not ctx.is_spark_table(name):
            raise ValueError(
                f"table or view {name} not found: neither a lakehouse table or view "
                "nor a Spark table or view"
            )
    return tree


def _at(ctx: Context, node: exp.Table, name: str, outer: At) -> At:
    version = node.args.get("version")
    if version is None:
        return outer
    kind = str(version.this).upper()
    how = str(version.args.get("kind") or "AS OF").upper()
    if how != "AS OF":
        raise unsupported(f"{kind} {how} on {name}", "use VERSION AS OF or TIMESTAMP AS OF")
    value = version.expression
    if kind == "VERSION":
        if not isinstance(value, exp.Literal):
            what = f"VERSION AS OF {value.sql(dialect='spark')} on {name}"
            raise unsupported(what, "give a version number")
        try:
            return At(version=int(value.this))
        except ValueError:
            raise ValueError(
                f"VERSION AS OF on {name} needs a version number, not {value.this!r}"
            ) from None
    if kind == "TIMESTAMP":
        return At(timestamp_ms=epoch_ms(ctx, value, name))
    raise unsupported(f"{kind} AS OF on {name}")


def epoch_ms(ctx: Context, value: exp.Expression, name: str) -> int:
    """A ``TIMESTAMP AS OF`` value as epoch milliseconds: a string literal read in
    the Spark session's time zone (or its own offset); any other constant
    expression evaluated by Spark (on the driver, no job)."""
    if isinstance(value, exp.Literal) and value.is_string:
        zone = str(ctx.spark.conf.get("spark.sql.session.timeZone", "UTC"))
        try:
            ts = dt.datetime.fromisoformat(value.this.strip())
            if ts.tzinfo is None:
                from zoneinfo import ZoneInfo

                ts = ts.replace(tzinfo=ZoneInfo(zone))
            return int(ts.timestamp() * 1000)
        except (ValueError, KeyError, LookupError):
            pass  # not ISO, or a zone Python does not know: Spark reads it
    expr = value.sql(dialect="spark")
    try:
        with quiet_analysis():
            row = ctx.spark.sql(f"SELECT unix_millis(CAST({expr} AS TIMESTAMP)) AS ms").first()
    except Exception as exc:
        first = first_line(exc)
        raise ValueError(f"bad TIMESTAMP AS OF {expr} on {name}: {first[:300]}") from None
    if row is None or row[0] is None:
        raise ValueError(f"bad TIMESTAMP AS OF {expr} on {name}: not a timestamp")
    return int(row[0])


def _view_tree(ctx: Context, name: str, at: At) -> exp.Expression:
    import sqlglot

    if at.version is not None:
        with ctx.lh.at_version(at.version) as view:
            d = view.describe_view(name)
    elif at.timestamp_ms is not None:
        with ctx.lh.at_time(at.timestamp_ms) as view:
            d = view.describe_view(name)
    else:
        d = ctx.reads.describe_view(name)

    try:
        tree = sqlglot.parse_one(canonical(d.sql) or d.sql, read="spark")
    except sqlglot.errors.SqlglotError as exc:
        raise ValueError(f"lakehouse view {name} has SQL Spark cannot read: {exc}") from None
    assert isinstance(tree, exp.Expression)
    return tree


def _key(db: exp.Expression | None, name: exp.Expression | None) -> tuple[str, str] | None:
    if db is None or name is None:
        return None
    return db.name.lower(), name.name.lower()


def _aliases(rw: _Rewrite, tree: exp.Expression) -> dict[tuple[str, str], exp.Identifier | None]:
    """The alias each lakehouse reference of ``tree`` written without one gets,
    by ``(ns, t)`` (lower case), with the columns qualified ``ns.t.col`` /
    ``lakehouse.ns.t.col`` rewritten to it, in place (before view bodies are
    put in: a view's query is rewritten on its own).

    The alias is the table's name (``None`` here: the name as written), so
    ``t.col`` and ``ns.t.col`` resolve, unless another such reference of the
    query has the same name in another namespace (``a.x JOIN b.x``): then each
    gets an alias of its own, ``a.x.col`` and ``b.x.col`` resolve and ``x.col``
    is ambiguous, as in Spark."""
    ctx = rw.ctx
    keys: set[tuple[str, str]] = set()
    for node in tree.find_all(exp.Table):
        if not isinstance(node.this, exp.Identifier) or node.alias or len(node.parts) < 2:
            continue
        key = _key(node.args.get("db"), node.this)
        name = table_name(node)
        if key is not None and (ctx.is_table(name) or ctx.is_view(name)):
            keys.add(key)
    if not keys:
        return {}
    aliases: dict[tuple[str, str], exp.Identifier | None] = {}
    for key in sorted(keys):
        if sum(1 for k in keys if k[1] == key[1]) == 1:
            aliases[key] = None
        else:
            aliases[key] = exp.to_identifier(f"{rw.marker}t{rw.aliases}")
            rw.aliases += 1
    for col in tree.find_all(exp.Column):
        key = _key(col.args.get("db"), col.args.get("table"))
        catalog = col.args.get("catalog")
        if key not in aliases or (catalog is not None and catalog.name.lower() != CATALOG):
            continue
        col.set("catalog", None)
        col.set("db", None)
        alias = aliases[key]
        if alias is not None:
            col.set("table", alias.copy())
    return aliases


def _alias_of(
    node: exp.Table, aliases: dict[tuple[str, str], exp.Identifier | None]
) -> exp.TableAlias:
    """The alias of a lakehouse reference written without one (see :func:`_aliases`)."""
    alias = aliases.get(_key(node.args.get("db"), node.this) or ("", ""))
    return exp.TableAlias(this=alias.copy() if alias is not None else exp.to_identifier(node.name))


def _pushable(ctx: Context, tree: exp.Expression) -> tuple[exp.Table, str] | None:
    """The table reference of a one-lakehouse-table query, with the simple conjuncts
    of its WHERE, unqualified, as Spark SQL (for ``read(where=)``); None when there
    are none or the query is not that simple."""
    if not isinstance(tree, exp.Select) or tree.args.get("with_") or tree.args.get("joins"):
        return None
    if tree.args.get("laterals"):
        return None
    where = tree.args.get("where")
    src = tree.args.get("from_")
    if where is None or src is None or not isinstance(src.this, exp.Table):
        return None
    table = src.this
    if table.args.get("sample") or table.args.get("pivots"):
        return None  # the WHERE applies to the sample's / pivot's rows, not the table's
    name = table_name(table)
    if len(table.parts) < 2 or not ctx.is_table(name):
        return None
    qualifiers = {table.alias_or_name.lower(), table.name.lower()}
    try:
        columns = {n.lower() for n in ctx.reads.describe_table(name).schema.names}
    except Exception:
        return None
    cond = where.this
    conjuncts = list(cond.flatten()) if isinstance(cond, exp.And) else [cond]
    keep = []
    for c in conjuncts:
        if not all(isinstance(n, _SIMPLE) for n in c.walk()):
            continue
        cols = list(c.find_all(exp.Column))
        if not cols:
            continue
        ok = True
        for col in cols:
            q = col.args.get("table")
            if col.name.lower() not in columns:
                ok = False
            if q is not None and q.name.lower() not in qualifiers:
                ok = False
        if not ok:
            continue
        c = c.copy()
        for col in c.find_all(exp.Column):
            col.set("table", None)
            col.set("db", None)
            col.set("catalog", None)
        keep.append(c.sql(dialect="spark"))
    if not keep:
        return None
    return table, " AND ".join(f"({k})" for k in keep)
