"""Benchmark of SQL against the Python calls (issue 23): ``python -m lakehouse.spark.bench --sql``.

One SparkSession; a table of ``rows`` orders (:func:`~lakehouse.spark.bench_common.orders_frame`,
written by :func:`lakehouse.spark.write` in ``files`` files, automatic compaction off) is the
*base*. Each repeat (after a warm-up round) clones the base once per statement and side
(``txn.clone_table``: the same files, no copy, not timed), so both sides change an untouched
table of the same rows, and runs every pair back to back, the order alternating:

* ``delete``: ``DELETE FROM <copy> WHERE order_id % 10 = 3`` vs
  ``lhs.delete(lh, spark, <copy>, "order_id % 10 = 3")``;
* ``update``: ``UPDATE <copy> SET quantity = quantity + 1 WHERE product_id = 42`` vs
  ``lhs.update(lh, spark, <copy>, "product_id = 42", {"quantity": "quantity + 1"})``;
* ``merge``: ``MERGE INTO <copy> t USING <view> s ON t.order_id = s.order_id WHEN MATCHED
  THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *`` vs ``lhs.merge(lh, src, <copy>,
  on="order_id")`` of ``merge_rows`` cached rows (half of them new; the view is ``src``);
* ``insert``: ``INSERT INTO <copy> SELECT * FROM <view>`` vs ``lhs.write(lh, ins, <copy>)``
  of ``insert_rows`` cached new orders (the view is ``ins``);
* ``select``: ``SELECT product_id, sum(total), count(*) FROM <table> VERSION AS OF v WHERE
  status = 'paid' GROUP BY product_id``, collected, vs ``lhs.read(lh, spark, <table>,
  version=v)`` and the same filter and aggregate on the DataFrame, collected (the table
  had 1% of its rows deleted after version ``v``, so the old version is what is read).

The SQL side's time includes parsing and planning and fetching its one-row result (the
Python call returns its count directly). Every repeat both sides' results are compared
with each other and with plain Spark's answer over the base's files (rows deleted and
updated, merge counts, rows after each statement, the aggregate): a disagreement raises
AssertionError instead of a number. The target is SQL <= 1.1x the Python call, for the
ratio of the medians and of the minimums.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import functions as F

import lakehouse
import lakehouse.spark as lhs
from lakehouse.spark.bench_common import (
    ORDERS_DDL,
    PAID,
    Clock,
    Pairs,
    aggregate,
    check,
    orders_frame,
    orders_of,
    summary,
)
from lakehouse.spark.types import arrow_schema

DELETE_COND = "order_id % 10 = 3"
UPDATE_COND = "product_id = 42"
SELECT_WHERE = PAID
HISTORY_DELETE = "order_id % 100 = 7"  # deleted from the time-travel table after version v
MERGE_VIEW, INSERT_VIEW = "bench_sql_merge_src", "bench_sql_insert_src"
TARGET = 1.1

#: (key, label) in the order of the printed table
ROWS: list[tuple[str, str]] = [
    ("delete", "DELETE ... WHERE (10%)"),
    ("update", "UPDATE ... SET ... WHERE"),
    ("merge", "MERGE INTO (UPDATE */INSERT *)"),
    ("insert", "INSERT INTO ... SELECT"),
    ("select", "SELECT ... VERSION AS OF"),
]


def _rows(frame: Any) -> dict[int, tuple[Any, int]]:
    return {r[0]: (r[1], r[2]) for r in frame.collect()}


def run_sql(
    rows: int = 1_000_000,
    repeats: int = 5,
    root: str | None = None,
    spark: Any = None,
    files: int = 8,
    merge_rows: int = 1000,
    insert_rows: int | None = None,
    warmup: bool = True,
) -> dict[str, Any]:
    """Run the SQL benchmark; returns a dict of results (see module doc).
    ``insert_rows``: default ``rows // 10``. ``warmup=False`` (tests): no uncounted
    first round."""
    from lakehouse.spark.sql import sql

    own_spark = spark is None
    if spark is None:
        spark = lhs.local_session("lakehouse-spark-bench")
    tmp = root or tempfile.mkdtemp(prefix="lh-spark-bench-")
    lh = lakehouse.open(os.path.join(tmp, "lh"))
    ins_rows = rows // 10 if insert_rows is None else insert_rows
    cached: list[Any] = []
    try:
        df = orders_frame(spark, rows, partitions=files)
        schema = arrow_schema(df.schema)
        schema = schema.set(0, pa.field("order_id", pa.int64(), nullable=False))
        base, history = "bench.orders", "bench.history"
        with lh.begin() as txn:
            txn.create_namespace("bench")
            txn.create_table(base, schema, {"compaction.auto": "false"})
        lhs.write(lh, df, base)
        urls = [f.url for f in lh.scan_plan(base)]
        plain = spark.read.schema(ORDERS_DDL).parquet(*urls)
        check("plain rows", plain.count(), rows)
        # the time-travel table: the base at version v, then 1% of its rows deleted
        with lh.begin() as txn:
            txn.clone_table(base, history)
        v = lh.version
        lhs.delete(lh, spark, history, HISTORY_DELETE)

        # what the checks compare with, computed once by plain Spark over the base's files
        deleted_want = plain.where(DELETE_COND).count()
        hit = plain.where(UPDATE_COND).agg(F.count("*"), F.sum("quantity")).collect()[0]
        upd_rows, upd_qty = int(hit[0]), int(hit[1] or 0)
        agg_want = aggregate(plain)

        ins = orders_of(spark.range(1 << 41, (1 << 41) + ins_rows, numPartitions=2), 5).cache()
        cached.append(ins)
        check("insert source rows", ins.count(), ins_rows)
        ins.createOrReplaceTempView(INSERT_VIEW)

        def affected(text: str, *columns: str) -> tuple[int, ...]:
            row = sql(lh, spark, text).collect()[0]
            return tuple(int(row[c]) for c in columns)

        def updated(table: str) -> tuple[int, int]:
            got = lhs.read(lh, spark, table).where(UPDATE_COND)
            r = got.agg(F.count("*"), F.sum("quantity")).collect()[0]
            return int(r[0]), int(r[1] or 0)

        select_text = (
            f"SELECT product_id, sum(total), count(*) FROM {history} VERSION AS OF {v} "
            f"WHERE {SELECT_WHERE} GROUP BY product_id"
        )
        pairs = Pairs(Clock(spark), [key for key, _ in ROWS])
        first = 0 if warmup else 1
        for i in range(first, repeats + 1):  # round 0 warms the JVM up and is not counted
            pairs.round(i)
            copies = {
                f"{op}_{side}": f"bench.{op}_{side}{i}"
                for op in ("d", "u", "m", "i")
                for side in ("sql", "py")
            }
            with lh.begin() as txn:
                for copy in copies.values():
                    txn.clone_table(base, copy)
            rng = np.random.default_rng(100 + i)
            half = merge_rows // 2
            new_ids = (1 << 40) + i * merge_rows + np.arange(merge_rows - half)
            ids = rng.permutation(np.concatenate([rng.choice(rows, half, replace=False), new_ids]))
            src = orders_of(spark.createDataFrame([(int(x),) for x in ids], "id long"), 7 + i)
            src = src.cache()
            src.count()
            src.createOrReplaceTempView(MERGE_VIEW)

            # DELETE
            d_py, d_sql = copies["d_py"], copies["d_sql"]
            n_py, (n_sql,) = pairs.run(
                "delete",
                partial(lhs.delete, lh, spark, d_py, DELETE_COND),
                partial(affected, f"DELETE FROM {d_sql} WHERE {DELETE_COND}", "num_affected_rows"),
            )
            check("DELETE: rows deleted (SQL, lhs.delete)", (n_sql, n_py), (n_py, deleted_want))
            got = (lh.table_stats(d_sql).rows, lh.table_stats(d_py).rows)
            check("DELETE: rows after (SQL, lhs.delete)", got, (rows - n_py, rows - n_py))

            # UPDATE
            u_py, u_sql = copies["u_py"], copies["u_sql"]
            n_py, (n_sql,) = pairs.run(
                "update",
                partial(lhs.update, lh, spark, u_py, UPDATE_COND, {"quantity": "quantity + 1"}),
                partial(
                    affected,
                    f"UPDATE {u_sql} SET quantity = quantity + 1 WHERE {UPDATE_COND}",
                    "num_affected_rows",
                ),
            )
            check("UPDATE: rows updated (SQL, lhs.update)", (n_sql, n_py), (upd_rows, upd_rows))
            want = (upd_rows, upd_qty + upd_rows)
            check(
                "UPDATE: updated rows (SQL, lhs.update)",
                (updated(u_sql), updated(u_py)),
                (want, want),
            )
            got = (lh.table_stats(u_sql).rows, lh.table_stats(u_py).rows)
            check("UPDATE: rows after (SQL, lhs.update)", got, (rows, rows))

            # MERGE
            m_py, m_sql = copies["m_py"], copies["m_sql"]
            res, counts = pairs.run(
                "merge",
                partial(lhs.merge, lh, src, m_py, on="order_id"),
                partial(
                    affected,
                    f"MERGE INTO {m_sql} t USING {MERGE_VIEW} s ON t.order_id = s.order_id "
                    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
                    "num_updated_rows",
                    "num_inserted_rows",
                    "num_deleted_rows",
                    "num_affected_rows",
                ),
            )
            want_m = (half, len(new_ids), 0, merge_rows)
            check("MERGE: lhs.merge (updated, inserted)", (res.updated, res.inserted), want_m[:2])
            check("MERGE: SQL (updated, inserted, deleted, affected)", counts, want_m)
            got = (lh.table_stats(m_sql).rows, lh.table_stats(m_py).rows)
            want_rows = rows + len(new_ids)
            check("MERGE: rows after (SQL, lhs.merge)", got, (want_rows, want_rows))

            # INSERT ... SELECT
            i_py, i_sql = copies["i_py"], copies["i_sql"]
            _, (n_sql,) = pairs.run(
                "insert",
                partial(lhs.write, lh, ins, i_py),
                partial(
                    affected,
                    f"INSERT INTO {i_sql} SELECT * FROM {INSERT_VIEW}",
                    "num_affected_rows",
                ),
            )
            check("INSERT: rows inserted (SQL)", n_sql, ins_rows)
            got = (lh.table_stats(i_sql).rows, lh.table_stats(i_py).rows)
            want_rows = rows + ins_rows
            check("INSERT: rows after (SQL, lhs.write)", got, (want_rows, want_rows))

            # SELECT ... VERSION AS OF
            agg_py, agg_sql = pairs.run(
                "select",
                lambda: aggregate(lhs.read(lh, spark, history, version=v)),
                lambda: _rows(sql(lh, spark, select_text)),
            )
            check("SELECT VERSION AS OF (SQL, lhs.read)", (agg_sql, agg_py), (agg_py, agg_want))

            src.unpersist()
            with lh.begin() as txn:
                for copy in copies.values():
                    txn.drop_table(copy)
        result: dict[str, Any] = {
            "rows": rows,
            "repeats": repeats,
            "files": len(urls),
            "cores": spark.sparkContext.defaultParallelism,
            "deleted_rows": deleted_want,
            "updated_rows": upd_rows,
            "merge_rows": merge_rows,
            "insert_rows": ins_rows,
            "select_groups": len(agg_want),
            "target": TARGET,
        }
        for key, _ in ROWS:
            r = summary(*pairs.times[key])
            min_ratio = r["lakehouse_s"]["min"] / r["plain_s"]["min"]
            result[key] = {
                **r,
                "min_ratio": min_ratio,
                "met": r["ratio"] <= TARGET and min_ratio <= TARGET,
            }
        return result
    finally:
        for frame in cached:
            frame.unpersist()
        for view in (MERGE_VIEW, INSERT_VIEW):
            spark.catalog.dropTempView(view)
        lh.close()
        if root is None:
            shutil.rmtree(tmp, ignore_errors=True)
        if own_spark:
            spark.stop()


def format_sql(res: dict[str, Any]) -> str:
    """The result as a table: SQL and the Python call (min / median seconds), the ratios
    of the minimums and of the medians, the spread of per-repeat ratios, CPU ratio, met."""
    lines = [
        f"{res['rows']:,} rows in {res['files']} files, {res['repeats']} repeats, "
        f"local[{res['cores']}]; SQL statement vs the Python call, target "
        f"{res['target']:.1f}x",
        f"{'statement':31} {'SQL s (min/med)':>15} {'Python s (min/med)':>18} {'min':>6} "
        f"{'median':>7} {'spread':>11} {'CPU':>6} {'met':>4}",
    ]
    for key, label in ROWS:
        r = res[key]
        p, q = r["plain_s"], r["lakehouse_s"]
        lo, hi = r["ratio_range"]
        cpu = f"{r['cpu_ratio']:.2f}x" if "cpu_ratio" in r else "-"
        ours, theirs = f"{q['min']:.2f} / {q['median']:.2f}", f"{p['min']:.2f} / {p['median']:.2f}"
        lines.append(
            f"{label:31} {ours:>15} {theirs:>18} {r['min_ratio']:>5.2f}x {r['ratio']:>6.2f}x"
            f" {lo:>4.2f}-{hi:.2f}x {cpu:>6} {'yes' if r['met'] else 'no':>4}"
        )
    lines.append(
        f"{res['deleted_rows']:,} rows deleted; {res['updated_rows']:,} updated; "
        f"{res['merge_rows']:,} merged ({res['merge_rows'] // 2:,} matched); "
        f"{res['insert_rows']:,} inserted; {res['select_groups']:,} groups selected"
    )
    return "\n".join(lines)
