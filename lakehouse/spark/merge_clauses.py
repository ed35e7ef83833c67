"""``merge`` with Delta's clauses: ``WHEN MATCHED [AND c] THEN UPDATE | DELETE``,
``WHEN NOT MATCHED [AND c] THEN INSERT``, ``WHEN NOT MATCHED BY SOURCE [AND c]
THEN UPDATE | DELETE``, in order, the first that holds wins.

The source ``s`` and the target ``t`` (read with each row's file and position)
are joined once, ``s LEFT JOIN (t LEFT SEMI JOIN s) ON <on>``: a source row
comes back once per target row it matches, or once with a null target when it
matches none (with a BY SOURCE clause: ``s FULL JOIN t``, and a target row no
source row matches comes back once with a null source). Each
joined row picks its clause (a ``CASE`` over the clauses of its kind, in
order; a condition that is null does not hold) and gets, per table column, the
value that clause gives it (``SET *`` / ``INSERT *``: the source's column of
the same name; a column an update does not set keeps the target's value, one
an insert does not give is null). Rows no clause picks do nothing. What is left
is one persisted DataFrame of actions: kind ``U`` (update: new row values and
the old row's file and position), ``D`` (delete: the position) or ``I``
(insert: the new row)::

    executors: s LEFT JOIN t ON cond ── pick clause ── values ── persist ── limit
    driver:    few actions:  check (no target row changed twice) ── delete_rows (D),
                             replace_rows (U), append (I): what the limit returned
               many:         check (job) ── bitmaps (D, job) ── update's path (U:
                             bitmaps + files) ── files (I, job) ── register

A target row that two source rows would change raises ValueError before
anything is written (SQL's and Delta's rule: the result would depend on which
source row came first); two source rows deleting the same target row are not
ambiguous and delete it once.

This module holds the merge itself and its Spark jobs: running the actions
DataFrame, the check that no target row changes twice (on the driver or as a
job), and recording deletions, updates and inserts in the transaction. The
clauses (:class:`MergeClause`), their checks and column resolution, and the
actions DataFrame are :mod:`lakehouse.spark.merge_plan`'s: everything the
driver can check is checked there before any job.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.model import MergeResult
from lakehouse.spark import ops
from lakehouse.spark.jobs import spark_job
from lakehouse.spark.merge_plan import (
    KIND_COL,
    MergeClause,
    MergePlan,
    checked_aliases,
    checked_clauses,
)
from lakehouse.spark.positions import collect_bitmaps
from lakehouse.spark.reader import FILE_COL, ROW_COL
from lakehouse.spark.session import configure
from lakehouse.spark.update import record_updates
from lakehouse.spark.writer import quote_ident

__all__ = ["DRIVER_ROWS", "MergeClause", "merge_clauses"]

log = logging.getLogger("lakehouse.spark")

#: at most this many actions (rows to update, delete or insert) are collected and
#: recorded by the driver after the one job that finds them; more are written by
#: executors (the same bound as a key merge's source, ``MERGE_DRIVER_ROWS``)
DRIVER_ROWS = 100_000

_AMBIGUOUS = (
    "cannot merge into {table}: several source rows matched the same target row "
    "and a clause would change it (file {file}, row {row}); which source row wins "
    "would be undefined. Make the source's matching rows unique (e.g. aggregate or "
    "deduplicate them) or narrow the ON condition"
)


def merge_clauses(
    lh: Any,
    df: DataFrame,
    table: str,
    on: Sequence[str] | str | None,
    clauses: Sequence[MergeClause],
    *,
    txn: Any = None,
    source_alias: str = "s",
    target_alias: str = "t",
) -> MergeResult:
    """Merge ``df`` into ``table`` by ``clauses`` (see the module doc). ``on``: a Spark
    SQL condition over ``target_alias.*`` and ``source_alias.*``, or key column names
    (a list, or one name; None: the table's primary key) meaning ``t.k = s.k AND
    ...``. Commits, or joins ``txn``."""
    if not isinstance(df, DataFrame):
        raise TypeError(f"df must be a pyspark DataFrame, not {type(df).__name__}")
    clauses = checked_clauses(clauses)
    sa, ta = checked_aliases(source_alias, target_alias)
    spark = df.sparkSession
    configure(spark)
    with ops.joined(lh, txn) as (t, own):
        tbl = ops.Table(lh, t, table)
        plan = MergePlan(spark, tbl, df, sa, ta)
        cond = plan.on_condition(on)
        actions, by_name = plan.actions(cond, clauses)
        result = _record(lh, t, tbl, actions, by_name)
        if own:
            t.commit()
        return result


# -- recording ---------------------------------------------------------------------------
def _record(
    lh: Any, t: Any, tbl: ops.Table, actions: DataFrame, by_name: dict[str, str]
) -> MergeResult:
    """Run the jobs and record the actions in ``t`` (module doc)."""
    table = tbl.name
    with spark_job(f"finding the merge's changes to {table}"):
        got = actions.limit(DRIVER_ROWS + 1).toArrow()
    if got.num_rows <= DRIVER_ROWS:
        return _record_on_driver(t, tbl, got, by_name)
    del got
    # many: the actions are computed once more, kept for the jobs that follow
    actions = actions.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        return _record_in_spark(lh, t, tbl, actions, by_name)
    finally:
        actions.unpersist()


def _record_in_spark(
    lh: Any, t: Any, tbl: ops.Table, actions: DataFrame, by_name: dict[str, str]
) -> MergeResult:
    """Record persisted actions with executors: check, deletions, updates, inserts."""
    table = tbl.name
    _check_once_in_spark(tbl, actions)
    kind = F.col(KIND_COL)
    deleted = updated = inserted = 0
    found = collect_bitmaps(
        actions.where(kind == "D"), by_name, f"finding the rows of {table} the merge deletes"
    )
    if found:  # first: a table with a primary key sees their keys free
        deleted = int(t.delete_rows(table, found, op="merge"))
    updated = record_updates(
        lh, t, tbl, actions.where(kind == "U").drop(KIND_COL), by_name, "merge"
    )
    new = actions.where(kind == "I").select(*[F.col(quote_ident(n)) for n in tbl.schema.names])
    written = tbl.write(new, f"writing the merge's inserts into {table}").get("", [])
    inserted = tbl.add(written)
    return MergeResult(inserted=inserted, updated=updated, deleted=deleted)


def _record_on_driver(
    t: Any, tbl: ops.Table, got: pa.Table, by_name: dict[str, str]
) -> MergeResult:
    """Record actions the driver holds: deletions, new versions, inserts."""
    table = tbl.name
    kinds = got.column(KIND_COL)
    changed = got.filter(pc.is_in(kinds, pa.array(["U", "D"])))
    _check_once(table, changed)
    dels = got.filter(pc.equal(kinds, "D"))
    upd = got.filter(pc.equal(kinds, "U"))
    ins = got.filter(pc.equal(kinds, "I"))
    deleted = updated = inserted = 0
    if dels.num_rows:
        deleted = int(t.delete_rows(table, _by_path(dels, by_name), op="merge"))
    if upd.num_rows:
        files = upd.column(FILE_COL).to_pylist()
        positions = pa.table(
            {
                "path": pa.array([by_name[f] for f in files], pa.string()),
                "position": upd.column(ROW_COL).cast(pa.int64()),
            }
        )
        rows = tbl.shaped(upd.select(tbl.schema.names))
        updated = int(t.replace_rows(table, positions, rows, op="merge"))
    if ins.num_rows:
        inserted = int(t.append(table, tbl.shaped(ins.select(tbl.schema.names))))
    return MergeResult(inserted=inserted, updated=updated, deleted=deleted)


def _by_path(rows: pa.Table, by_name: dict[str, str]) -> dict[str, np.ndarray]:
    """Positions (distinct, sorted) by data file path."""
    names = np.array(rows.column(FILE_COL).to_pylist(), dtype=object)
    pos = rows.column(ROW_COL).to_numpy()
    return {by_name[str(n)]: np.unique(pos[names == n]) for n in dict.fromkeys(names.tolist())}


def _check_once(table: str, changed: pa.Table) -> None:
    """No target row is changed by two source rows unless all of them delete it."""
    if not changed.num_rows:
        return
    marks = pa.table(
        {
            "f": changed.column(FILE_COL),
            "r": changed.column(ROW_COL),
            "u": pc.equal(changed.column(KIND_COL), "U"),
        }
    )
    counts = marks.group_by(["f", "r"]).aggregate([([], "count_all"), ("u", "any")])
    bad = counts.filter(pc.and_(pc.greater(counts.column("count_all"), 1), counts.column("u_any")))
    if bad.num_rows:
        row = bad.slice(0, 1).to_pylist()[0]
        raise ValueError(_AMBIGUOUS.format(table=table, file=row["f"], row=row["r"]))


def _check_once_in_spark(tbl: ops.Table, actions: DataFrame) -> None:
    """:func:`_check_once` as a Spark job (the actions stay in Spark)."""
    with spark_job(f"checking the merge's matches in {tbl.name}"):
        bad = (
            actions.where(F.col(KIND_COL).isin("U", "D"))
            .groupBy(FILE_COL, ROW_COL)
            .agg(
                F.count(F.lit(1)).alias("n"),
                F.max((F.col(KIND_COL) == "U").cast("int")).alias("u"),
            )
            .where("n > 1 AND u = 1")
            .limit(1)
            .collect()
        )
    if bad:
        raise ValueError(
            _AMBIGUOUS.format(table=tbl.name, file=bad[0][FILE_COL], row=bad[0][ROW_COL])
        )
