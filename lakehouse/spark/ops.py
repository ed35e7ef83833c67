"""The public Spark calls: write, read, delete (merge: :mod:`lakehouse.spark.merge`).

Each call follows one shape: the driver plans (table schema, scan plan,
DataFrame-vs-table matching, conditions analysed), executors do the heavy
part in Spark jobs (writing files, finding matching rows), and the driver
records the result in a lakehouse transaction (``add_files``,
``delete_rows``, ``remove_files``) and commits it::

    driver: begin (or the caller's txn) ── plan ── check ─┐
    executors:                         job(s): write files / find (file, row)
    driver: add_files / delete_rows ── commit ◀───────────┘  (or rollback:
            the files written are deleted; nothing is visible)

With ``txn=`` the call joins the caller's transaction and does not commit,
so Spark writes and plain lakehouse changes commit as one version. Without
it the call begins, commits and returns the version.

Failures leave nothing behind: bad input raises before any job; a job that
fails raises :class:`~lakehouse.spark.jobs.SparkJobError` (or ValueError for
bad data found in the job); files written are deleted (by the writer, or by
the transaction that owns them once registered); a transaction begun here
is rolled back.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakehouse.data import inline
from lakehouse.spark.counted import with_live_count
from lakehouse.spark.jobs import bad_condition, is_analysis_error, spark_job
from lakehouse.spark.location import Location, location_of
from lakehouse.spark.partitions import PART_COL, decode_key, with_key
from lakehouse.spark.positions import collect_bitmaps
from lakehouse.spark.reader import base_name, scan_frame
from lakehouse.spark.session import configure, is_connect
from lakehouse.spark.types import jvm_writable, match_columns
from lakehouse.spark.writer import GROUP_SEP, drop_field_ids, prepare, write_files

log = logging.getLogger("lakehouse.spark")

KIND = "_lh_kind"


@contextmanager
def joined(lh: Any, txn: Any) -> Iterator[tuple[Any, bool]]:
    """The caller's transaction, or a new one rolled back if the body raises."""
    if txn is not None:
        yield txn, False
        return
    own = lh.begin()
    try:
        yield own, True
    except BaseException:
        own.rollback()
        raise


def spark_condition(spark: SparkSession, condition: Any, what: str) -> Column:
    if isinstance(condition, Column):
        return condition
    if not isinstance(condition, str):
        raise TypeError(
            f"{what} must be a Spark SQL str or a Column, not {type(condition).__name__}"
        )
    if not condition.strip():
        raise ValueError(f"{what} must not be empty")
    try:
        with quiet_analysis():
            return F.expr(condition)
    except Exception as exc:
        if is_analysis_error(exc):
            raise _public(bad_condition(exc, condition, what)) from None
        raise


def analysed(frame: DataFrame, build: Any, condition: Any, what: str) -> DataFrame:
    """Apply ``build(frame)``; analysis errors (unknown column, bad type) -> ValueError."""
    try:
        with quiet_analysis():
            out: DataFrame = build(frame)
            out.schema  # noqa: B018 - forces analysis on the driver
        return out
    except Exception as exc:
        if is_analysis_error(exc):
            raise _public(bad_condition(exc, condition, what)) from None
        raise


def check_names(condition: Any, schema: Any, table: str, what: str) -> None:
    """A str condition names only ``table``'s columns: checked on the driver before
    Spark analyses it, so an unknown column is a short ValueError (no Spark error
    log) whose suggestions are the table's columns, never the lakehouse's internal
    ones (``_lh_file``, ``_lh_row``). Names compare case-insensitively, as Spark's
    default; a condition sqlglot cannot parse is left to Spark."""
    if not isinstance(condition, str):
        return
    import difflib

    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(condition, read="spark")
    except sqlglot.errors.SqlglotError:
        return
    if tree is None:
        return
    bound = {i.name.lower() for lam in tree.find_all(exp.Lambda) for i in lam.expressions}
    known = {n.lower(): n for n in schema.names}
    for c in tree.find_all(exp.Column):
        name = c.parts[0].name if c.parts else c.name  # s.f: the struct column s
        if not name or name.lower() in known or name.lower() in bound:
            continue
        if c.find_ancestor(exp.Select) is not None:  # a subquery's columns are its own
            continue
        close = difflib.get_close_matches(name.lower(), list(known), n=3)
        hint = f"; did you mean {' or '.join(repr(known[m]) for m in close)}?" if close else ""
        raise ValueError(
            f"bad {what} {condition!r}: {table} has no column {name!r} "
            f"(its columns: {', '.join(schema.names)}){hint}"
        )


_SUGGESTIONS = re.compile(r"Did you mean one of the following\? \[([^\]]*)\]")


def _public(exc: ValueError) -> ValueError:
    """``exc`` without the lakehouse's internal columns among Spark's suggestions."""

    def keep(m: re.Match[str]) -> str:
        names = [n.strip() for n in m.group(1).split(",")]
        names = [n for n in names if n and not n.strip("`").startswith("_lh_")]
        return f"Did you mean one of the following? [{', '.join(names)}]" if names else ""

    text = _SUGGESTIONS.sub(keep, str(exc))
    return exc if text == str(exc) else ValueError(text)


class _ThisThread(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.thread = threading.get_ident()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.thread != self.thread


@contextmanager
def quiet_analysis() -> Iterator[None]:
    """Silence pyspark's error log of a failed analysis (the exception with its JVM
    stack, dozens of lines) in this thread: the error becomes our ValueError."""
    from pyspark.logger import PySparkLogger  # pyspark's own class: it logs with extras

    names = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
    loggers = [PySparkLogger.getLogger(n) for n in names]
    quiet = _ThisThread()
    for lg in loggers:
        lg.addFilter(quiet)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(quiet)


class Table:
    """What the calls need of one table inside a transaction."""

    def __init__(self, lh: Any, txn: Any, table: str) -> None:
        if not isinstance(table, str):
            raise TypeError(f"table must be a str such as 'ns.table', not {type(table).__name__}")
        self.name = table
        self.txn = txn
        self.loc: Location = location_of(lh)
        d = txn.describe_table(table)  # NotFound for a missing table
        self.d = d
        self.schema = d.schema
        self.partitioned = not d.spec.is_unpartitioned
        self.jvm_write = self.loc.jvm and all(jvm_writable(f.type) for f in self.schema)

    def frame(
        self, spark: SparkSession, *, positions: bool, where: Any = None
    ) -> tuple[DataFrame, dict[str, str]]:
        """The table's rows (with ``where``: of the files that may hold a row matching
        that Spark SQL condition, pruned on the driver; see :func:`_prunable`)."""
        plan = self.txn.scan_plan(self.name, where=_prunable(spark, where, self.schema))
        by_name = {base_name(f.path): f.path for f in plan}
        return scan_frame(spark, plan, self.schema, self.loc, positions=positions), by_name

    def write(self, df: DataFrame, what: str, split: str | None = None) -> dict[str, list[Written]]:
        """Write ``df`` (shaped as the table, plus ``split``) as files of the table:
        one file per partition per task for a partitioned table (rows repartitioned
        by partition when needed), each file's rows sorted by the sort keys.
        Returns ``[(path, partition values)]`` by ``split`` value (``""`` without)."""
        cols = [split] if split is not None else []
        framed = with_key(drop_field_ids(df), self.d, sort_first=cols)
        if self.partitioned:
            cols.append(PART_COL)
        written = write_files(
            framed,
            self.loc,
            self.txn.data_dir(self.name),
            self.schema,
            lambda: self.txn.new_data_path(self.name),
            what,
            jvm=self.jvm_write,
            split=cols,
            ordered=True,
        )
        out: dict[str, list[Written]] = {}
        try:
            for group, paths in written.items():
                parts = group.split(GROUP_SEP)
                values = decode_key(self.d, parts[-1]) if self.partitioned else ()
                out.setdefault(parts[0] if split is not None else "", []).extend(
                    (p, values) for p in paths
                )
        except BaseException:
            self.loc.delete([p for paths in written.values() for p in paths])
            raise
        return out

    def collect_small(self, df: DataFrame, what: str) -> pa.Table | None:
        """``df``'s rows on the driver when Spark's plan bounds them by the table's
        ``inline.max_rows`` (data held by the driver, ``range``, ``limit``: the
        optimized plan's ``maxRows``, known without a job), to be inlined; None
        when they may be more (or inlining is off)."""
        limit = inline.max_rows(self.d)
        if not limit or _max_rows(df) > limit:
            return None
        with spark_job(what):
            got = df.toArrow()
        return self.shaped(got) if got.num_rows <= limit else None

    def read_small(self, files: list[Written]) -> pa.Table | None:
        """The rows of files just written, when they are at most the table's
        ``inline.max_rows`` (footers read until they exceed it), to be inlined
        instead; None otherwise."""
        limit = inline.max_rows(self.d)
        if not limit or len(files) > limit:
            return None
        total = 0
        for p, _ in files:
            with self.loc.open_input(p) as fh:
                total += pq.ParquetFile(fh).metadata.num_rows
            if total > limit:
                return None
        parts = []
        for p, _ in files:
            with self.loc.open_input(p) as fh:
                parts.append(self.shaped(pq.read_table(fh)))
        return pa.concat_tables(parts) if parts else None

    def shaped(self, rows: pa.Table, nullable: Sequence[str] = ()) -> pa.Table:
        """Rows Spark produced, in the table's types (as a Python task casts them);
        ``nullable``: columns that may hold nulls whatever the table says (a merge
        source lacking them)."""
        schema = pa.schema(
            [f.with_nullable(True) if f.name in nullable else f for f in self.schema]
        )
        try:
            return rows.select(schema.names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise ValueError(f"a value does not fit the types of {self.name}: {e}") from None

    def add(
        self,
        files: list[Written],
        on: Sequence[str] | None = None,
        updates: bool = False,
        replace: bool = False,
    ) -> int:
        """Register written files with their partitions (so the driver never reads
        them back for it); they are deleted if that fails. ``replace``: they replace
        the partitions they hold (``replace_partitions``)."""
        if not files:
            return 0
        paths = [p for p, _ in files]
        extra: dict[str, Any] = {}
        if self.partitioned:
            extra["partitions"] = [v for _, v in files]
        if replace:
            extra["replace_partitions"] = True
        try:
            return int(self.txn.add_files(self.name, paths, on=on, updates=updates, **extra))
        except BaseException:
            self.loc.delete(paths)
            raise


#: a file written by a job: its relative path and partition values
Written = tuple[str, tuple[Any, ...]]


def _max_rows(df: DataFrame) -> float:
    """The most rows ``df`` may have by Spark's optimized plan (a bound the plan
    knows without running a job: local data, ``range``, ``limit``); infinite when it
    does not know, and for a Spark Connect DataFrame (no plan on the client)."""
    if is_connect(df.sparkSession):
        return float("inf")
    try:
        bound = df._jdf.queryExecution().optimizedPlan().maxRows()
        return float(bound.get()) if bound.isDefined() else float("inf")
    except Exception:  # a private API moved: no bound
        return float("inf")


def write(
    lh: Any,
    df: DataFrame,
    table: str,
    *,
    mode: str = "append",
    where: str | None = None,
    txn: Any = None,
) -> int | None:
    """Write a DataFrame into ``table``; see :func:`write_counted` (which also
    returns the rows written)."""
    return write_counted(lh, df, table, mode=mode, where=where, txn=txn)[0]


def write_counted(
    lh: Any,
    df: DataFrame,
    table: str,
    *,
    mode: str = "append",
    where: str | None = None,
    txn: Any = None,
) -> tuple[int | None, int]:
    """Write a DataFrame into ``table``: ``mode="append"``, ``"overwrite"`` (all rows,
    or with ``where`` only the rows matching that SQL condition; every new row must
    match it) or ``"replace_partitions"`` (every row of each partition the DataFrame
    has rows in is replaced, other partitions are untouched, as
    ``txn.replace_partitions``; on an unpartitioned table: overwrite). Commits and
    returns the version, or joins ``txn`` and returns None; with the rows written
    (SQL's ``num_affected_rows``).

    A partitioned table is written one file per partition per task: each row's
    partition is computed in Spark (hidden, never a column of the files), the rows
    are repartitioned by it unless the DataFrame keeps each partition in one task
    already, and the driver records every file's partition without reading it.

    ``where`` (Spark SQL) is checked by Spark (every new row, inside the write job)
    and, after the job, applied by the lakehouse's own ``txn.overwrite(table, <no
    rows>, where=...)`` with its string literals respelled for that parser (see
    :func:`_lakehouse_where`), so both mean the same rows: it marks the matching
    rows deleted and records the overwrite's guard (a concurrent commit inserting
    rows that match ``where`` conflicts).
    """
    if not isinstance(df, DataFrame):
        raise TypeError(f"df must be a pyspark DataFrame, not {type(df).__name__}")
    if mode not in ("append", "overwrite", "replace_partitions"):
        raise ValueError(
            f"mode must be 'append', 'overwrite' or 'replace_partitions', not {mode!r}"
        )
    if where is not None and mode != "overwrite":
        raise ValueError("where is only used with mode='overwrite'")
    if where is not None and not isinstance(where, str):
        raise TypeError(f"where must be a SQL str, not {type(where).__name__}")
    spark = df.sparkSession
    configure(spark)
    with joined(lh, txn) as (t, own):
        tbl = Table(lh, t, table)
        plans = match_columns(df.schema, tbl.schema, table)
        cond = None
        own_where: str | None = None  # where, in the lakehouse parser's spelling
        if where is not None:
            cond = spark_condition(spark, where, "where")
            own_where = _lakehouse_where(spark, where, tbl.schema)
        shaped = analysed(df, lambda f: prepare(f, plans, table, cond), where, "where")
        replace = mode == "replace_partitions" and tbl.partitioned
        whole = mode != "append" and where is None and not replace
        remove = [f.path for f in t.scan_plan(table)] if whole else []
        # a write of at most inline.max_rows rows is inlined (docs/spark.md, "Small
        # writes"): collected when Spark's plan bounds its rows, else read back from
        # the files the job wrote (then deleted: they never become data files)
        rows = tbl.collect_small(shaped, f"writing {table}")
        written = [] if rows is not None else tbl.write(shaped, f"writing {table}").get("", [])
        try:
            if rows is None and written:
                rows = tbl.read_small(written)
            if own_where is not None:
                t.overwrite(table, tbl.schema.empty_table(), where=own_where)
            if remove:  # first: new rows may have the keys of rows they replace
                t.remove_files(table, remove)
            if rows is None:
                n = tbl.add(written, replace=replace)
            else:
                n = rows.num_rows
                if n:  # small: inlined by the lakehouse's own write
                    if replace:
                        t.replace_partitions(table, rows)
                    else:
                        t.append(table, rows)
        except BaseException:
            if rows is None:
                tbl.loc.delete([p for p, _ in written])
            raise
        finally:
            if rows is not None and written:  # read back and inlined: not data files
                tbl.loc.delete([p for p, _ in written])
        return (t.commit() if own else None), n


def _lakehouse_where(spark: SparkSession, where: str, schema: Any) -> str:
    """``where`` (Spark SQL) spelled for the lakehouse's own parser, which reads it to
    delete the rows an overwrite replaces: the same text with each string literal
    requoted so the lakehouse reads the value Spark reads (``'a\\\\'`` -> ``'a\\'``,
    ``'o\\'b'`` -> ``'o''b'``; :mod:`lakehouse.spark.sqltext`). ValueError before any
    job when a literal cannot be carried over exactly or the lakehouse's parser
    refuses the condition."""
    from lakehouse.data.predicate import parse_where
    from lakehouse.spark.sqltext import canonical, lakehouse_text, uncertain_strings

    spark_text = canonical(where)  # 'o''b' is one literal to Spark, two to sqlglot
    uncertain = None if spark_text is None else uncertain_strings(spark, spark_text)
    if spark_text is None or uncertain is None:
        raise ValueError(f"bad where {where!r}: it is not valid SQL")
    text = lakehouse_text(spark_text)
    if uncertain or text is None:
        raise ValueError(
            f"bad where {where!r}: a string literal in it may not mean to the lakehouse"
            " what it means to Spark (escape only \\\\, \\', \\\", \\n, \\t, \\r, \\% or"
            " \\_; no raw, hex or adjacent literals)"
        )
    try:
        parse_where(text, schema)
    except ValueError as exc:
        raise ValueError(f"bad where {where!r}: {exc}") from None
    return text


def read(
    lh: Any,
    spark: SparkSession,
    table: str,
    *,
    version: int | None = None,
    timestamp: Any = None,
    txn: Any = None,
    where: Any = None,
) -> DataFrame:
    """``table`` at the latest version, at ``version`` or as of ``timestamp`` (aware
    datetime or epoch ms), as a lazy DataFrame without deleted rows.

    With ``txn``: the rows as that transaction sees them (its own writes
    included); a SERIALIZABLE transaction records the read, so a concurrent
    commit that changes the table makes it conflict.

    ``where`` (a Spark SQL condition, str or Column): only the matching rows. A str
    the lakehouse's own parser reads the same way also prunes the files on the
    driver, before Spark sees them: by partition (a few key ranges of the table's
    metadata) and by column bounds; Spark then applies it to the rows read.
    """
    if version is not None and timestamp is not None:
        raise ValueError("give version or timestamp, not both")
    if txn is not None and (version is not None or timestamp is not None):
        raise ValueError("a transaction reads at its own version; drop version/timestamp")
    if not isinstance(table, str):
        raise TypeError(f"table must be a str such as 'ns.table', not {type(table).__name__}")
    configure(spark)
    loc = location_of(lh)
    cond = None if where is None else spark_condition(spark, where, "where")
    if txn is not None:
        schema = txn.describe_table(table).schema
        check_names(where, schema, table, "where")
        plan = txn.scan_plan(table, where=_prunable(spark, where, schema))
    else:
        with _view(lh, version, timestamp) as view:
            schema = view.describe_table(table).schema
            check_names(where, schema, table, "where")
            plan = view.scan_plan(table, where=_prunable(spark, where, schema))
    frame = scan_frame(spark, plan, schema, loc)
    if cond is None:
        return with_live_count(frame, plan)  # its count() from the plan: no job
    return analysed(frame, lambda f: f.where(cond), where, "where")


def _prunable(spark: SparkSession, where: Any, schema: pa.Schema) -> Any:
    """What of ``where`` prunes files on the driver: a Predicate holding only the
    single-column facts (``lakehouse.terms``) of the top-level ``AND`` conjuncts the
    lakehouse's parser reads as Spark does; None: nothing (Spark filters every row).
    Facts only, never the whole expression, so an operator the two engines evaluate
    differently cannot drop a file Spark needs. Each conjunct goes to the lakehouse's
    parser with its string literals requoted in that parser's spelling (which has no
    backslash escapes; :mod:`lakehouse.spark.sqltext`); a conjunct holding a literal
    whose value Spark may read otherwise is not used. Not used either: facts on
    timezone-aware timestamp columns when the session's time zone is not UTC (Spark
    reads a timestamp literal in that zone, the lakehouse in the column's)."""
    if not isinstance(where, str):
        return None
    import sqlglot
    from sqlglot import exp

    from lakehouse.data.predicate import Predicate, parse_where
    from lakehouse.spark.sqltext import canonical, lakehouse_text, uncertain_strings

    text = canonical(where)  # 'o''b' is one literal to Spark, two to sqlglot
    if text is None:
        return None
    try:
        tree = sqlglot.parse_one(text, read="spark")
    except sqlglot.errors.SqlglotError:
        return None
    uncertain = uncertain_strings(spark, text)
    if tree is None or uncertain is None:
        return None
    conjuncts = list(tree.flatten()) if isinstance(tree, exp.And) else [tree]
    zone = str(spark.conf.get("spark.sql.session.timeZone", "UTC"))
    utc = zone in ("UTC", "Etc/UTC", "GMT", "Z", "+00:00")
    terms = []
    for c in conjuncts:
        if uncertain and not _certain(c, uncertain):
            continue
        own = lakehouse_text(c.sql(dialect="spark"))
        if own is None:
            continue
        try:
            pred = parse_where(own, schema)
        except (ValueError, TypeError, NotImplementedError):
            continue
        for term in getattr(pred, "terms", ()):
            t = schema.field(term.column).type
            if utc or not (pa.types.is_timestamp(t) and t.tz is not None):
                terms.append(term)
    if not terms:
        return None
    return Predicate(pc.scalar(True), frozenset(t.column for t in terms), where, terms=tuple(terms))


def _certain(node: Any, uncertain: set[int]) -> bool:
    """No literal under ``node`` is one of the ``uncertain`` ones (by its start in the
    text); a string literal whose place sqlglot did not record counts as uncertain."""
    from sqlglot import exp

    for n in node.walk():
        start = n.meta.get("start") if n.meta else None
        if start in uncertain:
            return False
        if start is None and isinstance(n, exp.Literal) and n.is_string:
            return False
    return True


def _view(lh: Any, version: int | None, timestamp: Any) -> Any:
    """A read-only view: the latest version, ``version``, or as of ``timestamp``."""
    if timestamp is not None:
        return lh.at_time(timestamp)
    return lh.at_version(lh.version if version is None else version)


def delete(lh: Any, spark: SparkSession, table: str, condition: Any, *, txn: Any = None) -> int:
    """Delete the rows matching a Spark SQL ``condition`` (str or Column); executors
    find them, the driver commits deletion vectors. Returns rows deleted."""
    configure(spark)
    cond = spark_condition(spark, condition, "condition")
    with joined(lh, txn) as (t, own):
        tbl = Table(lh, t, table)
        check_names(condition, tbl.schema, table, "condition")
        # only the files that may hold a matching row are scanned (partitions, bounds)
        frame, by_name = tbl.frame(spark, positions=True, where=condition)
        hits = analysed(frame, lambda f: f.where(cond), condition, "condition")
        found = collect_bitmaps(hits, by_name, f"finding the rows of {table} to delete")
        n = int(t.delete_rows(table, found)) if found else 0
        if own:
            t.commit()
        return n
