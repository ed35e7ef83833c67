"""``merge``: upsert a DataFrame into a lakehouse table by key columns.

The source (prepared to the table's columns, persisted) is first collected
to the driver, up to :data:`MERGE_DRIVER_ROWS` rows plus one (one job):

* a source of at most that many rows is checked on the driver (keys
  non-null and unique) and written by the driver in the same transaction:
  on the table's primary key the lakehouse's own ``txn.merge`` does the
  rest (the key index finds the matched rows; the target is not scanned);
  on other columns ONE Spark job joins the target's rows with the
  broadcast source keys and returns the matched rows' file, row, source
  row and the columns the source lacks; the driver checks that no source
  key matched twice and records the new versions (``replace_rows``),
  deletions (``delete_rows``) and inserts (``append``, inlined when small);
* a larger source stays in Spark: on the primary key its keys come to the
  driver and the key index finds the matched rows; on other columns a job
  checks the source's keys and a second joins them with the whole target,
  the matched keys return to the driver (checked there for target
  duplicates); executors write the updated and inserted rows (one job, two
  outputs) and the driver records the deletions and the new files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from lakehouse.data.rows import filter_rows, take_rows
from lakehouse.errors import MergeKeyError
from lakehouse.model import MergeResult
from lakehouse.spark import ops
from lakehouse.spark.jobs import spark_job
from lakehouse.spark.merge_clauses import MergeClause, merge_clauses
from lakehouse.spark.reader import FILE_COL, ROW_COL
from lakehouse.spark.session import configure
from lakehouse.spark.types import arrow_frame, match_columns
from lakehouse.spark.writer import col, prepare

#: A merge source of at most this many rows is collected to the driver (checked
#: there, matched with the target in one Spark job, written by the driver); a
#: larger one is checked, matched and written by Spark jobs. See docs/spark.md,
#: "Deletes and merges": 100,000 rows of the benchmark's orders schema are about
#: 10 MB of Arrow on the driver and a broadcast of their keys.
MERGE_DRIVER_ROWS = 100_000


def merge(
    lh: Any,
    df: DataFrame,
    table: str,
    on: Sequence[str] | str | None = None,
    *,
    txn: Any = None,
    when_matched: str = "update",
    when_not_matched: str = "insert",
    clauses: Sequence[MergeClause] | None = None,
    source_alias: str = "s",
    target_alias: str = "t",
) -> MergeResult:
    """Upsert ``df`` into ``table`` by the key columns ``on`` (default: the table's
    primary key) with the Python ``txn.merge`` semantics: keys unique and non-null in
    the source, unique in the target. On the primary key, the source's keys come to
    the driver and the key index finds the matched rows: the target is not scanned.

    With ``clauses`` (:class:`~lakehouse.spark.merge_clauses.MergeClause`, Delta's
    ``WHEN`` clauses, in order, the first that holds wins): ``on`` is a Spark SQL
    condition over ``target_alias.*`` and ``source_alias.*`` (or key column names),
    and :mod:`lakehouse.spark.merge_clauses` does the merge."""
    if not isinstance(df, DataFrame):
        raise TypeError(f"df must be a pyspark DataFrame, not {type(df).__name__}")
    if clauses is not None:
        if (when_matched, when_not_matched) != ("update", "insert"):
            raise ValueError("give clauses or when_matched/when_not_matched, not both")
        return merge_clauses(
            lh,
            df,
            table,
            on,
            clauses,
            txn=txn,
            source_alias=source_alias,
            target_alias=target_alias,
        )
    keys = [on] if isinstance(on, str) else list(on or ())
    if on is None:
        keys = list((txn if txn is not None else lh).describe_table(table).primary_key)
        if not keys:
            raise ValueError(f"{table} has no primary key: name the merge key columns with on=")
    if not keys or not all(isinstance(k, str) for k in keys):
        raise ValueError("on must name at least one key column")
    if when_matched not in ("update", "delete", "ignore"):
        raise ValueError(
            f"when_matched must be 'update', 'delete' or 'ignore', not {when_matched!r}"
        )
    if when_not_matched not in ("insert", "ignore"):
        raise ValueError(f"when_not_matched must be 'insert' or 'ignore', not {when_not_matched!r}")
    spark = df.sparkSession
    configure(spark)
    with ops.joined(lh, txn) as (t, own):
        tbl = ops.Table(lh, t, table)
        for k in keys:
            if k not in tbl.schema.names:
                raise ValueError(f"merge key {k!r} is not a column of {table}")
        # columns the source lacks: matched rows keep their values, inserted rows get nulls
        kept = [n for n in tbl.schema.names if n not in df.schema.names]
        lenient = pa.schema([f.with_nullable(True) if f.name in kept else f for f in tbl.schema])
        src = prepare(df, match_columns(df.schema, lenient, table), table).persist()
        try:
            result = _merge(spark, t, tbl, src, keys, when_matched, when_not_matched, kept)
        finally:
            src.unpersist()
        if own:
            t.commit()
        return result


def _merge(
    spark: SparkSession,
    t: Any,
    tbl: ops.Table,
    src: DataFrame,
    keys: list[str],
    when_matched: str,
    when_not_matched: str,
    kept: list[str],
) -> MergeResult:
    table = tbl.name
    by_key = bool(tbl.d.primary_key) and set(keys) == set(tbl.d.primary_key)
    with spark_job(f"collecting the merge source for {table}"):
        raw = src.limit(MERGE_DRIVER_ROWS + 1).toArrow()
    if raw.num_rows <= MERGE_DRIVER_ROWS and _checked(raw, keys):
        rows = tbl.shaped(raw, nullable=kept)
        if by_key:  # the lakehouse's own merge: the key index, the driver's writes
            res: MergeResult = t.merge(
                table,
                rows.drop_columns(kept),
                on=keys,
                when_matched=when_matched,
                when_not_matched=when_not_matched,
            )
            return res
        return _merge_on_driver(
            spark, t, tbl, raw, rows, keys, when_matched, when_not_matched, kept
        )
    del raw
    if by_key:
        found = _matched_by_key(t, tbl, src, keys)  # the source's keys, then the key index
    else:
        found = _matched_by_scan(spark, tbl, src, keys)
    got, matched = found
    not_null = [n for n in kept if not tbl.schema.field(n).nullable]
    if not_null and when_not_matched == "insert":
        with spark_job(f"counting the merge source for {table}"):
            inserts = src.count() - got.num_rows
        if inserts:
            raise ValueError(
                f"the merge source lacks column {not_null[0]!r}, which may not be null, "
                f"and {inserts} of its rows would be inserted"
            )
    # job 3: write updated (U) and inserted (I) rows apart, in one job
    outputs = []
    if when_matched == "update" and matched:
        outputs.append("U")
    if when_not_matched == "insert":
        outputs.append("I")
    written: dict[str, list[ops.Written]] = {}
    if outputs:
        # the matched keys came back to the driver: a small relation with exact
        # statistics (joining the whole target's keys here made Spark broadcast 3M
        # keys and fail)
        tkeys = arrow_frame(spark, got.select(keys)).withColumn("_m", F.lit(True))
        joined = src.join(tkeys, keys, "left")
        if kept and "U" in outputs:
            # the target's values of the columns the source lacks, for the matched rows
            target, _ = tbl.frame(spark, positions=False)
            old = target.select(*[col(k) for k in keys], *[col(n) for n in kept]).join(
                F.broadcast(tkeys.select(*keys)), keys, "left_semi"
            )
            joined = joined.drop(*kept).join(old, keys, "left")
        rows_df = joined.select(
            *[col(n) for n in tbl.schema.names],
            F.when(F.col("_m").isNotNull(), F.lit("U")).otherwise(F.lit("I")).alias(ops.KIND),
        )
        rows_df = rows_df.where(F.col(ops.KIND).isin(outputs))
        written = tbl.write(rows_df, f"writing the merge into {table}", split=ops.KIND)
    n_matched = sum(len(v) for v in matched.values())
    # the matched rows go first: a table with a primary key then sees the new
    # versions' keys as free. Updated rows are registered with the keys too: the
    # transaction then records a merge, whose deletions conflict with concurrent
    # changes of the same rows (a plain delete_rows records deletes, which may
    # overlap other deletes)
    try:
        if when_matched in ("update", "delete") and matched:
            t.delete_rows(table, matched, updated=when_matched == "update")
    except BaseException:
        tbl.loc.delete([p for files in written.values() for p, _ in files])
        raise
    updated = tbl.add(written.get("U", []), on=keys, updates=True)
    inserted = tbl.add(written.get("I", []), on=keys)
    deleted = n_matched if when_matched == "delete" else 0
    return MergeResult(inserted=inserted, updated=updated, deleted=deleted)


def _checked(raw: pa.Table, keys: list[str]) -> bool:
    """The source's keys are non-null and unique (ValueError otherwise); False when
    Arrow cannot group their type (the Spark path then checks them)."""
    if any(raw.column(k).null_count for k in keys):
        raise MergeKeyError(f"the merge source has null keys in {keys}")
    try:
        counts = raw.select(keys).group_by(keys).aggregate([([], "count_all")])
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    dup = counts.filter(pc.greater(counts.column("count_all"), 1))
    if dup.num_rows:
        row = dup.slice(0, 1).to_pylist()[0]
        raise MergeKeyError(
            f"the merge source has duplicate keys on {keys} (e.g. {[row[k] for k in keys]}); "
            "each key may appear once"
        )
    return True


def _merge_on_driver(
    spark: SparkSession,
    t: Any,
    tbl: ops.Table,
    raw: pa.Table,
    rows: pa.Table,
    keys: list[str],
    when_matched: str,
    when_not_matched: str,
    kept: list[str],
) -> MergeResult:
    """Merge a source held by the driver (``raw`` as Spark returned it, ``rows`` in
    the table's types, its keys checked) on columns other than the primary key: one
    Spark job finds the target rows its keys match, the driver writes the rest."""
    table = tbl.name
    if not rows.num_rows:
        return MergeResult(inserted=0, updated=0, deleted=0)
    fill = kept if when_matched == "update" else []
    got, by_name = _matched_on_driver(spark, tbl, raw, keys, fill)
    src_row = got.column(_SRC).to_numpy()
    if len(np.unique(src_row)) != len(src_row):
        raise MergeKeyError(
            f"a source key matches two rows of {table} on {keys}; merge needs unique target keys"
        )
    is_matched = np.zeros(rows.num_rows, dtype=bool)
    is_matched[src_row] = True
    new = filter_rows(rows, pa.array(~is_matched)) if when_not_matched == "insert" else None
    not_null = [n for n in kept if not tbl.schema.field(n).nullable]
    if not_null and new is not None and new.num_rows:
        raise ValueError(
            f"the merge source lacks column {not_null[0]!r}, which may not be null, "
            f"and {new.num_rows} of its rows would be inserted"
        )
    paths = [by_name[str(n)] for n in got.column(FILE_COL).to_pylist()]
    updated = deleted = inserted = 0
    if when_matched == "update" and got.num_rows:
        upd = take_rows(rows, pa.array(src_row))
        for n in fill:  # the columns the source lacks: the target row's values
            i = upd.schema.get_field_index(n)
            upd = upd.set_column(
                i, upd.schema.field(i), got.column(n).cast(upd.schema.field(i).type)
            )
        positions = pa.table(
            {"path": pa.array(paths, pa.string()), "position": got.column(ROW_COL).cast(pa.int64())}
        )
        updated = int(t.replace_rows(table, positions, upd, op="merge"))
    elif when_matched == "delete" and got.num_rows:
        deleted = int(t.delete_rows(table, _by_path(paths, got.column(ROW_COL).to_numpy())))
    if new is not None and new.num_rows:
        inserted = int(t.append(table, new, on=keys))
    return MergeResult(inserted=inserted, updated=updated, deleted=deleted)


_SRC = "_lh_src"


def _matched_on_driver(
    spark: SparkSession, tbl: ops.Table, raw: pa.Table, keys: list[str], fill: list[str]
) -> tuple[pa.Table, dict[str, str]]:
    """The target rows the source's keys match, in one Spark job: the target's rows
    (of the files that may hold a key, when one integer key bounds them) joined with
    the source's keys broadcast with their row number; returns ``_lh_file``,
    ``_lh_row``, ``_lh_src`` (the source row) and the ``fill`` columns per match."""
    # the keys as Spark returned them: their Spark types are the target's
    src_keys = raw.select(keys).append_column(_SRC, pa.array(np.arange(raw.num_rows)))
    target, by_name = tbl.frame(spark, positions=True, where=_bounds(tbl, raw, keys))
    hit = target.select(*[col(k) for k in keys], *[col(n) for n in fill], FILE_COL, ROW_COL).join(
        F.broadcast(spark.createDataFrame(src_keys)), keys, "inner"
    )
    with spark_job(f"matching the merge source with {tbl.name}"):
        got = hit.select(FILE_COL, ROW_COL, _SRC, *[col(n) for n in fill]).toArrow()
    return got, by_name


def _bounds(tbl: ops.Table, raw: pa.Table, keys: list[str]) -> str | None:
    """A condition pruning the target's files to those that may hold a source key:
    ``k BETWEEN min AND max`` for one integer key column with a plain name."""
    if len(keys) != 1 or not raw.num_rows:
        return None
    k = keys[0]
    if not (pa.types.is_integer(tbl.schema.field(k).type) and k.isidentifier()):
        return None
    lo, hi = pc.min_max(raw.column(k)).values()
    return f"{k} >= {lo.as_py()} AND {k} <= {hi.as_py()}"


def _by_path(paths: list[str], rows: np.ndarray) -> dict[str, np.ndarray]:
    """Positions grouped by data file path, sorted."""
    names = np.array(paths, dtype=object)
    return {str(p): np.sort(rows[names == p]) for p in dict.fromkeys(paths)}


def _matched_by_key(
    t: Any, tbl: ops.Table, src: DataFrame, keys: list[str]
) -> tuple[pa.Table, dict[str, np.ndarray]]:
    """The target rows the source matches, on a table's primary key: the source's
    keys come to the driver (one job), are checked there (non-null, unique), and the
    key index says where the matching rows are; the target is never scanned."""
    with spark_job(f"collecting the merge source's keys for {tbl.name}"):
        src_keys = src.select(*[col(k) for k in keys]).toArrow()
    _checked(src_keys, keys)  # key columns are never floating or nested: Arrow groups them
    got = t.lookup_keys(tbl.name, src_keys)
    return got, _by_path(got.column("path").to_pylist(), got.column("position").to_numpy())


def _matched_by_scan(
    spark: SparkSession, tbl: ops.Table, src: DataFrame, keys: list[str]
) -> tuple[pa.Table, dict[str, np.ndarray]]:
    """The target rows the source matches (each at most once), by joining the
    source's keys with the whole target in Spark (two jobs)."""
    table = tbl.name
    # job 1: the source's keys are non-null and unique
    any_null = F.lit(False)
    for k in keys:
        any_null = any_null | col(k).isNull()
    with spark_job(f"checking the merge source for {table}"):
        bad = (
            src.groupBy(*[col(k) for k in keys])
            .agg(F.count(F.lit(1)).alias("n"))
            .where((F.col("n") > 1) | any_null)
            .limit(1)
            .collect()
        )
    if bad:
        row = bad[0].asDict()
        if any(row[k] is None for k in keys):
            raise MergeKeyError(f"the merge source has null keys in {keys}")
        raise MergeKeyError(
            f"the merge source has duplicate keys on {keys} (e.g. {[row[k] for k in keys]}); "
            "each key may appear once"
        )
    # job 2: the target rows the source matches, whose keys come to the driver: each
    # may match once (checked there; by a window in Spark when Arrow cannot group them)
    target, by_name = tbl.frame(spark, positions=True)
    src_keys = src.select(*[col(k) for k in keys])
    hit = target.select(*[col(k) for k in keys], FILE_COL, ROW_COL).join(
        src_keys, keys, "left_semi"
    )
    with spark_job(f"matching the merge source with {table}"):
        got = hit.toArrow()  # keys, file, row: the matched target rows only
    try:
        twice = got.select(keys).group_by(keys).aggregate([]).num_rows != got.num_rows
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        counted = hit.withColumn("_n", F.count(F.lit(1)).over(Window.partitionBy(*keys)))
        with spark_job(f"checking the merge's matches in {table}"):
            twice = bool(counted.where(F.col("_n") > 1).limit(1).collect())
    if twice:
        raise MergeKeyError(
            f"a source key matches two rows of {table} on {keys}; merge needs unique target keys"
        )
    paths = [by_name[n] for n in got.column(FILE_COL).to_pylist()]
    return got, _by_path(paths, got.column(ROW_COL).to_numpy())
