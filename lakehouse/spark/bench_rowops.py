"""Benchmark of row operations (issue 25): ``python -m lakehouse.spark.bench --rowops``.

One SparkSession; a table of ``rows`` orders (:func:`~lakehouse.spark.bench.orders_frame`,
written by :func:`lakehouse.spark.write` in ``files`` files, automatic compaction off so
the files stay those files) is the *base*. Plain Spark reads the SAME Parquet files:
``spark.read.schema(ORDERS_DDL).parquet(*<the base's file urls>)``, made anew for each
timed operation (its file listing is part of the operation, as resolving the table
version and its files is part of ours). Each repeat (after a
warm-up round) runs every pair back to back, the order alternating, on fresh copies of
the base (``txn.clone_table``: the same files, no copy, not timed), so every repeat
deletes 10% of the current rows of an untouched table:

* ``delete_10pct``: ``lhs.delete(lh, spark, copy, "order_id % 10 = 3")`` vs plain
  ``where(<the same>).count()``;
* ``count_10pct_deleted``: ``lhs.read(lh, spark, copy).count()`` after that delete vs
  plain ``count()`` (of the files without deletions);
* ``aggregate_10pct_deleted``: paid orders' ``sum(total)`` and ``count(*)`` per
  ``product_id``, collected, over the same two;
* ``count_no_deletes``: ``lhs.read(lh, spark, base).count()`` vs plain ``count()``;
* ``update``: ``lhs.update(lh, spark, copy, "product_id = 42", {"quantity": "quantity +
  1"})`` vs plain ``where`` + ``withColumn`` + ``write.parquet`` of those rows;
* ``merge``: ``lhs.merge(lh, src, copy, on="order_id")`` of ``merge_rows`` cached rows
  (half of them new) into the copy (no primary key) vs plain
  ``join(src, "order_id").count()``.

Every result is checked against plain Spark (rows deleted, counts, the aggregate of the
live rows, the updated rows' values, rows after the merge): a wrong result raises
AssertionError instead of a number. ``memory``: the Python driver's RSS growth (peak,
sampled every 2 ms by a thread, minus the RSS before) while ``lhs.delete`` removes 30% of
a fresh copy (``order_id % 10 < 3``), measured once after the warm-up round; needs psutil.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import threading
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
MEMORY_COND = "order_id % 10 < 3"
UPDATE_COND = "product_id = 42"
AGG_WHERE = PAID

#: (key, label, the issue's target ratio or None) in the order of the printed table
ROWS: list[tuple[str, str, float | None]] = [
    ("delete_10pct", "delete 10%", 1.5),
    ("update", "update (product_id = 42)", 1.5),
    ("merge", "merge 1,000 rows, half new", 1.5),
    ("count_10pct_deleted", "count() after 10% deleted", 1.3),
    ("aggregate_10pct_deleted", "aggregate after 10% deleted", 1.3),
    ("count_no_deletes", "read().count(), no deletes", None),
]
MEMORY_TARGET_MB = 20.0


def _count(lh: Any, spark: Any, table: str) -> int:
    return int(lhs.read(lh, spark, table).count())


def _join_count(plain: Any, src: Any) -> int:
    return int(plain.join(src, "order_id").count())


def _read_aggregate(lh: Any, spark: Any, table: str) -> dict[int, tuple[Any, int]]:
    return aggregate(lhs.read(lh, spark, table))


class _PeakRss:
    """The peak RSS of this process while the block runs (a thread samples every 2 ms)."""

    def __init__(self) -> None:
        import psutil

        self.proc = psutil.Process()
        self.before = self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __enter__(self) -> _PeakRss:
        gc.collect()
        self.before = self.peak = self.proc.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def _memory(lh: Any, spark: Any, table: str, plain: Any) -> dict[str, Any] | None:
    """Driver RSS growth of ``lhs.delete`` of 30% of ``table`` (None without psutil)."""
    try:
        import psutil  # noqa: F401
    except ImportError:
        return None
    want = plain.where(MEMORY_COND).count()
    with _PeakRss() as rss:
        n = lhs.delete(lh, spark, table, MEMORY_COND)
    check("rows deleted (30%)", n, want)
    growth = (rss.peak - rss.before) / 2**20
    return {
        "deleted_rows": n,
        "rss_before_mb": rss.before / 2**20,
        "rss_peak_mb": rss.peak / 2**20,
        "growth_mb": growth,
        "target_mb": MEMORY_TARGET_MB,
        "met": growth <= MEMORY_TARGET_MB,
    }


def run_rowops(
    rows: int = 3_000_000,
    repeats: int = 3,
    root: str | None = None,
    spark: Any = None,
    files: int = 16,
    merge_rows: int = 1000,
    warmup: bool = True,
) -> dict[str, Any]:
    """Run the row-operation benchmark; returns a dict of results (see module doc).
    ``warmup=False`` (tests): no uncounted first round."""
    own_spark = spark is None
    if spark is None:
        spark = lhs.local_session("lakehouse-spark-bench")
    tmp = root or tempfile.mkdtemp(prefix="lh-spark-bench-")
    lh = lakehouse.open(os.path.join(tmp, "lh"))
    try:
        df = orders_frame(spark, rows, partitions=files)
        schema = arrow_schema(df.schema)
        schema = schema.set(0, pa.field("order_id", pa.int64(), nullable=False))
        base = "bench.orders"
        with lh.begin() as txn:
            txn.create_namespace("bench")
            txn.create_table(base, schema, {"compaction.auto": "false"})
        lhs.write(lh, df, base)
        urls = [f.url for f in lh.scan_plan(base)]
        plain = spark.read.schema(ORDERS_DDL).parquet(*urls)
        check("plain rows", plain.count(), rows)

        def plain_files() -> Any:
            """Plain Spark's DataFrame of the files, made anew for each timed operation
            (its file listing included) as ours resolves the table version each time."""
            return spark.read.schema(ORDERS_DDL).parquet(*urls)

        # what the checks compare with, computed once by plain Spark
        live_agg = aggregate(plain.where(f"NOT ({DELETE_COND})"))
        hit = plain.where(UPDATE_COND).agg(F.count("*"), F.sum("quantity")).collect()[0]
        upd_rows, upd_qty = int(hit[0]), int(hit[1] or 0)
        has_update = hasattr(lhs, "update")
        update_dir = os.path.join(tmp, "plain-update")

        def plain_update() -> None:
            new = plain_files().where(UPDATE_COND).withColumn("quantity", F.col("quantity") + 1)
            new.write.mode("overwrite").parquet(update_dir)

        pairs = Pairs(Clock(spark), [key for key, _, _ in ROWS])
        out: dict[str, Any] = {}
        memory: dict[str, Any] | None = None
        first = 0 if warmup else 1
        for i in range(first, repeats + 1):  # round 0 warms the JVM up and is not counted
            pairs.round(i)
            d, u, m = (f"bench.d{i}", f"bench.u{i}", f"bench.m{i}")
            with lh.begin() as txn:
                for copy in (d, u, m):
                    txn.clone_table(base, copy)
            rng = np.random.default_rng(100 + i)
            half = merge_rows // 2
            new_ids = (1 << 40) + i * merge_rows + np.arange(merge_rows - half)
            ids = rng.permutation(np.concatenate([rng.choice(rows, half, replace=False), new_ids]))
            src = orders_of(spark.createDataFrame([(int(x),) for x in ids], "id long"), 7 + i)
            src = src.cache()
            src.count()
            want, n = pairs.run(
                "delete_10pct",
                lambda: plain_files().where(DELETE_COND).count(),
                partial(lhs.delete, lh, spark, d, DELETE_COND),
            )
            check("rows deleted", n, want)
            check("rows after the delete", lh.table_stats(d).rows, rows - n)
            out["deleted_rows"] = n
            p_count, q_count = pairs.run(
                "count_10pct_deleted",
                lambda: plain_files().count(),
                partial(_count, lh, spark, d),
            )
            check("count() after the delete", (p_count, q_count), (rows, rows - n))
            _, q_agg = pairs.run(
                "aggregate_10pct_deleted",
                lambda: aggregate(plain_files()),
                partial(_read_aggregate, lh, spark, d),
            )
            check("aggregate after the delete", q_agg, live_agg)
            counts = pairs.run(
                "count_no_deletes", lambda: plain_files().count(), partial(_count, lh, spark, base)
            )
            check("count() without deletes", counts, (rows, rows))
            if has_update:
                new_qty = {"quantity": "quantity + 1"}
                _, n = pairs.run(
                    "update", plain_update, partial(lhs.update, lh, spark, u, UPDATE_COND, new_qty)
                )
                check("rows updated", n, upd_rows)
                after = lhs.read(lh, spark, u).where(UPDATE_COND)
                got = after.agg(F.count("*"), F.sum("quantity")).collect()[0]
                check("updated rows", (got[0], int(got[1] or 0)), (upd_rows, upd_qty + upd_rows))
                check("rows after the update", lh.table_stats(u).rows, rows)
                out["updated_rows"] = n
            matched, res = pairs.run(
                "merge",
                lambda: _join_count(plain_files(), src),  # noqa: B023
                partial(lhs.merge, lh, src, m, on="order_id"),
            )
            check("plain join rows", matched, half)
            check("merge (updated, inserted)", (res.updated, res.inserted), (half, len(new_ids)))
            check("rows after the merge", lh.table_stats(m).rows, rows + len(new_ids))
            src.unpersist()
            if i == first:  # after the warm-up: imports and first-call caches are in place
                with lh.begin() as txn:
                    txn.clone_table(base, "bench.mem")
                memory = _memory(lh, spark, "bench.mem", plain)
            with lh.begin() as txn:
                for copy in (d, u, m, "bench.mem") if i == first else (d, u, m):
                    txn.drop_table(copy)
        if not has_update:
            del pairs.times["update"]
        result: dict[str, Any] = {
            "rows": rows,
            "repeats": repeats,
            "files": len(urls),
            "cores": spark.sparkContext.defaultParallelism,
            "update_available": has_update,
            **out,
            "merge_rows": merge_rows,
            "memory": memory,
        }
        for key, _, target in ROWS:
            if key in pairs.times:
                r = summary(*pairs.times[key])
                result[key] = {
                    **r,
                    "target": target,
                    "met": None if target is None else r["ratio"] <= target,
                }
        return result
    finally:
        lh.close()
        if root is None:
            shutil.rmtree(tmp, ignore_errors=True)
        if own_spark:
            spark.stop()


def format_rowops(res: dict[str, Any]) -> str:
    """The result as the issue's table: ours and plain (min / median seconds), ratio of
    medians, spread of per-repeat ratios, CPU ratio, target, met."""
    lines = [
        f"{res['rows']:,} rows in {res['files']} files, {res['repeats']} repeats, "
        f"local[{res['cores']}]",
        f"{'operation':30} {'ours s (min/med)':>17} {'plain s (min/med)':>18} {'ratio':>6} "
        f"{'spread':>11} {'CPU':>6} {'target':>6} {'met':>4}",
    ]
    for key, label, _ in ROWS:
        if key not in res:
            lines.append(f"{label:30} skipped (lakehouse.spark.update is not available)")
            continue
        r = res[key]
        p, q = r["plain_s"], r["lakehouse_s"]
        lo, hi = r["ratio_range"]
        cpu = f"{r['cpu_ratio']:.2f}x" if "cpu_ratio" in r else "-"
        target = "-" if r["target"] is None else f"{r['target']:.1f}x"
        met = "-" if r["met"] is None else ("yes" if r["met"] else "no")
        ours, theirs = f"{q['min']:.2f} / {q['median']:.2f}", f"{p['min']:.2f} / {p['median']:.2f}"
        lines.append(
            f"{label:30} {ours:>17} {theirs:>18}"
            f" {r['ratio']:>5.2f}x {lo:>4.2f}-{hi:.2f}x {cpu:>6} {target:>6} {met:>4}"
        )
    counts = [f"{res['deleted_rows']:,} rows deleted"]
    if "updated_rows" in res:
        counts.append(f"{res['updated_rows']:,} updated")
    counts.append(f"{res['merge_rows']:,} merged ({res['merge_rows'] // 2:,} matched)")
    lines.append("; ".join(counts))
    mem = res["memory"]
    if mem is None:
        lines.append("driver memory: not measured (psutil is not installed)")
    else:
        lines.append(
            f"driver memory, delete 30% ({mem['deleted_rows']:,} rows): "
            f"+{mem['growth_mb']:.1f} MB RSS (peak {mem['rss_peak_mb']:.0f} MB), "
            f"target {mem['target_mb']:.0f} MB, met: {'yes' if mem['met'] else 'no'}"
        )
    return "\n".join(lines)
