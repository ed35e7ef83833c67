"""What every SQL statement handler gets: the lakehouse, the SparkSession and the
transaction the statement runs in.

Runs on the driver. Handlers (``query``, ``dml``, ``merge``, ``ddl``,
``catalog``) take ``(ctx: Context, tree)`` and return a DataFrame; they read
through ``ctx.reads`` (the open transaction, so its own writes are seen and a
SERIALIZABLE read is recorded, or the lakehouse's latest version) and write
only inside ``with ctx.writing() as t:``, which joins the session's
transaction (``BEGIN ... COMMIT``) or begins one that commits when the block
ends cleanly (rolled back, its files deleted, when it raises).
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from sqlglot import exp

from lakehouse.spark.counted import with_rows
from lakehouse.spark.ops import joined
from lakehouse.spark.writer import quote_ident


@dataclass
class Context:
    """One statement's surroundings. ``txn``: the open transaction the statement
    joins (a :class:`~lakehouse.spark.sql.session.SqlSession`'s after ``BEGIN``, or
    the ``txn=`` of :func:`lakehouse.spark.sql`), None outside one; ``isolation``:
    the level a transaction begun by :meth:`writing` gets (None: the lakehouse's
    default)."""

    lh: Any
    spark: SparkSession
    txn: Any = None
    isolation: Any = None

    @property
    def reads(self) -> Any:
        """Where reads go: the open transaction, else the lakehouse (latest version)."""
        return self.txn if self.txn is not None else self.lh

    @contextmanager
    def writing(self) -> Iterator[Any]:
        """The transaction to write in: ``ctx.txn`` (not committed here), or a new one
        committed when the block ends without an exception (rolled back otherwise)."""
        if self.txn is None and self.isolation is not None:
            own = self.lh.begin(self.isolation)
            try:
                yield own
            except BaseException:
                own.rollback()
                raise
            own.commit()
            return
        with joined(self.lh, self.txn) as (t, own_txn):
            yield t
            if own_txn:
                t.commit()

    def is_table(self, name: str) -> bool:
        """True when ``name`` (``"ns.t"``, see :func:`~lakehouse.spark.sql.names.table_name`)
        is a lakehouse table as ``ctx.reads`` sees it."""
        return self._exists(name, "table_exists")

    def is_view(self, name: str) -> bool:
        """True when ``name`` is a lakehouse view as ``ctx.reads`` sees it."""
        return self._exists(name, "view_exists")

    def is_spark_table(self, name: str) -> bool:
        """True when ``name`` is a table or view of the Spark session's catalog."""
        try:
            return bool(self.spark.catalog.tableExists(name))
        except Exception:  # a name Spark's catalog cannot even look up
            return False

    def _exists(self, name: str, call: str) -> bool:
        if not isinstance(name, str) or "." not in name:
            return False  # one part: a temp view, a CTE or a Spark table (table names
            # may hold dots: ns.`a.b` is the table "a.b" of ns)
        try:
            return bool(getattr(self.reads, call)(name))
        except (ValueError, TypeError):  # not a valid lakehouse name: not one of ours
            return False

    def resolve_names(self, tree: exp.Expression) -> None:
        """Spell every lakehouse reference of ``tree`` as the lakehouse does, in
        place: Spark resolves identifiers case-insensitively, so ``Sales.Orders``
        names the table ``sales.orders`` when no object is named exactly
        ``Sales.Orders`` and exactly one table or view matches ignoring case. Other
        names are left as written (a new table keeps the case it is created with)."""
        for node in tree.find_all(exp.Table):
            parts = node.parts
            if len(parts) not in (2, 3) or not all(isinstance(p, exp.Identifier) for p in parts):
                continue
            name = ".".join(p.name for p in parts[-2:])
            if len(parts) == 3 and parts[0].name.lower() != "lakehouse":
                continue
            if self.is_table(name) or self.is_view(name):
                continue
            found = self._ignoring_case(parts[-2].name, parts[-1].name)
            if found is not None:
                parts[-2].set("this", found[0])
                parts[-1].set("this", found[1])

    def _ignoring_case(self, ns: str, name: str) -> tuple[str, str] | None:
        """The one (namespace, object) that matches ``ns.name`` ignoring case, if any."""
        try:
            spaces = [n for n in self.reads.list_namespaces() if n.lower() == ns.lower()]
            hits = [
                (n, o)
                for n in spaces
                for o in (*self.reads.list_tables(n), *self.reads.list_views(n))
                if o.lower() == name.lower()
            ]
        except (ValueError, TypeError, LookupError):
            return None
        return hits[0] if len(hits) == 1 else None

    def result(self, **columns: Any) -> DataFrame:
        """A one-row DataFrame of ``columns`` (in the order given), each typed from
        its Python value: int -> bigint, float -> double, bool -> boolean, str and
        None -> string, Decimal -> decimal(38, 18), datetime -> timestamp, date ->
        date. The schema is explicit, so this works under Spark Connect too.

        Counts (int, bool, None values only: every DML result) are a SQL ``VALUES``
        row, a local relation fetched without a Spark job; rows created from Python
        objects cost a job when fetched (measured: 10-35 ms vs 0.1-2 s, which an
        ``UPDATE``'s result would add to the update itself)."""
        literals = [lit for v in columns.values() if (lit := _count_literal(v)) is not None]
        if columns and len(literals) == len(columns):
            names = ", ".join(quote_ident(k) for k in columns)
            frame = self.spark.sql(f"SELECT * FROM VALUES ({', '.join(literals)}) AS v({names})")
            return with_rows(frame, [tuple(columns.values())])
        fields = [T.StructField(k, _spark_type(v), True) for k, v in columns.items()]
        return self.spark.createDataFrame([tuple(columns.values())], T.StructType(fields))

    def empty(self) -> DataFrame:
        """A DataFrame of no rows and no columns (what DDL returns, as in Spark)."""
        return self.spark.createDataFrame([], T.StructType([]))


def _count_literal(value: Any) -> str | None:
    """A Spark SQL literal of an int (bigint), bool or None (string) value; None for
    any other value."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return f"CAST({value} AS BIGINT)"
    if value is None:
        return "CAST(NULL AS STRING)"
    return None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def original(obj: Any) -> str:
    """The original text of a parsed statement (``tree.meta["sql"]``, set by
    :func:`~lakehouse.spark.sql.statements.split`; else sqlglot's Spark SQL of it),
    or the last line of a ParseError's message."""
    if isinstance(obj, exp.Expression):
        text = obj.meta.get("sql")
        return text if isinstance(text, str) else obj.sql(dialect="spark")
    text = _ANSI.sub("", str(obj))
    return text.split("\n")[-1].strip() if "\n" in text else text


def to_spark(ctx: Context, tree: exp.Expression) -> DataFrame:
    """The statement handed to Spark as written (it names no lakehouse object)."""
    return ctx.spark.sql(original(tree))


def _spark_type(value: Any) -> T.DataType:
    if isinstance(value, bool):
        return T.BooleanType()
    if isinstance(value, int):
        return T.LongType()
    if isinstance(value, float):
        return T.DoubleType()
    if isinstance(value, decimal.Decimal):
        return T.DecimalType(38, 18)
    if isinstance(value, dt.datetime):
        return T.TimestampType()
    if isinstance(value, dt.date):
        return T.DateType()
    if value is None or isinstance(value, str):
        return T.StringType()
    raise TypeError(f"no Spark type for a result value of type {type(value).__name__}")
