"""Benchmark: lakehouse.spark against plain Spark Parquet, same run, as ratios.

Run with ``python -m lakehouse.spark.bench [--rows 3000000] [--repeats 5]``.

One cached DataFrame of ``rows`` order-like rows (8 columns: ids, an int,
a decimal, a double, a string, a timestamp) is written and read repeatedly;
each repeat runs the plain and the lakehouse variant back to back (which one
goes first alternates), so load on the machine hits both alike. Measured:

* ``write``: :func:`lakehouse.spark.write` into a new table (files written,
  files described, transaction committed) vs ``df.write.parquet(dir)``;
* ``read``: :func:`lakehouse.spark.read` of that table materialised
  (``write.format("noop")``), planning included, vs
  ``spark.read.parquet(<the same files>)`` materialised;
* ``read, 1% deleted``: the same after :func:`lakehouse.spark.delete` of 1%
  of the rows (deletion vectors, applied by the broadcast anti-join) vs the
  plain read of the same files (which returns the deleted rows too).

With ``--partitioned`` (:func:`run_partitioned`): a write into a table
partitioned by ``day(placed_at)`` vs plain ``partitionBy("day")`` Parquet, and
a read of one day (pruned on the driver) vs plain Spark's partition-pruned read.

With ``--merge`` (:func:`run_merge`, issue 22): :func:`lakehouse.spark.merge`
of ``--merge-rows`` keyed rows (half matching order ids spread uniformly at
random over the table, half new) into a table of ``rows`` orders with
``primary_key=["order_id"]`` vs :func:`lakehouse.spark.write` of the same
rows (an append to a copy of the table without a key); the "plain" column is
the write.

With ``--rowops`` (:mod:`lakehouse.spark.bench_rowops`, issue 25): delete 10%,
update ~600 rows, merge 1,000 rows without a primary key, ``count()`` and a
filtered aggregate after 10% deleted and ``read().count()`` without deletes, each
vs plain Spark on the same files, and the driver's memory deleting 30%.

With ``--sql`` (:mod:`lakehouse.spark.bench_sql`, issue 23): ``DELETE``, ``UPDATE``,
``MERGE INTO``, ``INSERT INTO ... SELECT`` and ``SELECT ... VERSION AS OF`` through
:func:`lakehouse.spark.sql`, each vs the equivalent Python call on the same data
(default 1,000,000 rows in 8 files).

Reports the median, min and max seconds of each and the ratio of medians
(plus the spread of per-repeat ratios), and with psutil installed the ratio
of the median CPU seconds (JVM and driver), which moves far less than wall
time when other work shares the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from lakehouse.spark.bench_common import Clock, orders_frame, orders_of, summary


def run(
    rows: int = 3_000_000, repeats: int = 5, root: str | None = None, spark: Any = None
) -> dict[str, Any]:
    """Run the benchmark; returns a dict of results (see module doc)."""
    import pyarrow as pa

    import lakehouse
    import lakehouse.spark as lhs

    own_spark = spark is None
    if spark is None:
        spark = lhs.local_session("lakehouse-spark-bench")
    tmp = root or tempfile.mkdtemp(prefix="lh-spark-bench-")
    try:
        df = orders_frame(spark, rows).cache()
        df.count()
        lh = lakehouse.open(os.path.join(tmp, "lh"))
        from lakehouse.spark.types import arrow_schema

        schema = arrow_schema(df.schema)
        schema = schema.set(0, pa.field("order_id", pa.int64(), nullable=False))

        def noop(frame: Any) -> None:
            frame.write.format("noop").mode("overwrite").save()

        clock = Clock(spark)
        w_plain: list[tuple[float, float]] = []
        w_lake: list[tuple[float, float]] = []
        r_plain: list[tuple[float, float]] = []
        r_lake: list[tuple[float, float]] = []
        d_plain: list[tuple[float, float]] = []
        d_lake: list[tuple[float, float]] = []
        for i in range(repeats + 1):  # round 0 warms the JVM up and is not counted
            table = f"bench.orders{i}"
            with lh.begin() as txn:
                if i == 0:
                    txn.create_namespace("bench")
                txn.create_table(table, schema)
            plain_dir = os.path.join(tmp, f"plain{i}")
            flip = i % 2 == 1  # alternate which variant runs first
            wp, wl = clock.pair(
                lambda: df.write.parquet(plain_dir),  # noqa: B023
                lambda: lhs.write(lh, df, table),  # noqa: B023
                flip,
            )
            urls = [f.url for f in lh.scan_plan(table)]
            rp, rl = clock.pair(
                lambda: noop(spark.read.parquet(*urls)),  # noqa: B023
                lambda: noop(lhs.read(lh, spark, table)),  # noqa: B023
                flip,
            )
            deleted = lhs.delete(lh, spark, table, "order_id % 100 = 7")
            dp, dl = clock.pair(
                lambda: noop(spark.read.parquet(*urls)),  # noqa: B023
                lambda: noop(lhs.read(lh, spark, table)),  # noqa: B023
                flip,
            )
            if i:
                w_plain.append(wp)
                w_lake.append(wl)
                r_plain.append(rp)
                r_lake.append(rl)
                d_plain.append(dp)
                d_lake.append(dl)
            shutil.rmtree(plain_dir, ignore_errors=True)
            with lh.begin() as txn:
                txn.drop_table(table)
        lh.expire_versions(keep_last=1, grace=timedelta(0))  # no reader elsewhere: free now
        lh.close()
        df.unpersist()
        return {
            "rows": rows,
            "repeats": repeats,
            "cores": spark.sparkContext.defaultParallelism,
            "deleted_rows": deleted,
            "write": summary(w_plain, w_lake),
            "read": summary(r_plain, r_lake),
            "read_1pct_deleted": summary(d_plain, d_lake),
        }
    finally:
        if root is None:
            shutil.rmtree(tmp, ignore_errors=True)
        if own_spark:
            spark.stop()


def run_partitioned(
    rows: int = 3_000_000, repeats: int = 3, root: str | None = None, spark: Any = None
) -> dict[str, Any]:
    """Partitioned tables (see ``--partitioned``): a write of ``rows`` orders into a
    table partitioned by ``day(placed_at)`` (90 days) vs plain
    ``df.withColumn("day", to_date(placed_at)).write.partitionBy("day").parquet``,
    and a read of one day (``where`` on ``placed_at``, pruned on the driver) vs
    plain Spark's partition-pruned read (``where day = ...``), both materialised."""
    import datetime as dt

    import pyarrow as pa
    from pyspark.sql import functions as F

    import lakehouse
    import lakehouse.spark as lhs
    from lakehouse.spark.types import arrow_schema

    own_spark = spark is None
    if spark is None:
        spark = lhs.local_session("lakehouse-spark-bench")
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    tmp = root or tempfile.mkdtemp(prefix="lh-spark-bench-")
    try:
        df = orders_frame(spark, rows).cache()
        df.count()
        plain_df = df.withColumn("day", F.to_date("placed_at"))
        lh = lakehouse.open(os.path.join(tmp, "lh"))
        schema = arrow_schema(df.schema)
        schema = schema.set(0, pa.field("order_id", pa.int64(), nullable=False))
        day = dt.date(2025, 1, 2)  # orders_frame: one row a second from 2025-01-01
        where = f"placed_at >= '{day}' AND placed_at < '{day + dt.timedelta(days=1)}'"

        def noop(frame: Any) -> None:
            frame.write.format("noop").mode("overwrite").save()

        clock = Clock(spark)
        # (label, plain writer, the lakehouse table's write.distribution-mode)
        variants: list[tuple[str, Callable[[str], Any], str]] = [
            ("write", lambda d: plain_df.write.partitionBy("day").parquet(d), "hash"),
            (
                "write_distribution_none",
                lambda d: plain_df.write.partitionBy("day").parquet(d),
                "none",
            ),
            (
                "write_vs_plain_repartition",
                lambda d: plain_df.repartition("day").write.partitionBy("day").parquet(d),
                "hash",
            ),
        ]
        writes: dict[str, tuple[list[tuple[float, float]], list[tuple[float, float]]]] = {
            label: ([], []) for label, _, _ in variants
        }
        r_plain: list[tuple[float, float]] = []
        r_lake: list[tuple[float, float]] = []
        files: dict[str, int] = {}
        day_rows = 0
        for i in range(repeats + 1):  # round 0 warms the JVM up and is not counted
            flip = i % 2 == 1
            for n, (label, plain_write, mode) in enumerate(variants):
                table = f"bench.days{i}_{n}"
                with lh.begin() as txn:
                    if i == 0 and n == 0:
                        txn.create_namespace("bench")
                    props = {"write.distribution-mode": mode}
                    txn.create_table(table, schema, props, partition_by=["day(placed_at)"])
                plain_dir = os.path.join(tmp, f"plain{i}_{n}")
                wp, wl = clock.pair(
                    lambda: plain_write(plain_dir),  # noqa: B023
                    lambda: lhs.write(lh, df, table),  # noqa: B023
                    flip,
                )
                if i:
                    writes[label][0].append(wp)
                    writes[label][1].append(wl)
                    files[f"{label}_plain"] = sum(
                        f.endswith(".parquet") for _, _, fs in os.walk(plain_dir) for f in fs
                    )
                    files[f"{label}_lakehouse"] = len(lh.list_data_files(table))
                if n:
                    shutil.rmtree(plain_dir, ignore_errors=True)
                    with lh.begin() as txn:
                        txn.drop_table(table)
            table = f"bench.days{i}_0"
            plain_dir = os.path.join(tmp, f"plain{i}_0")
            rp, rl = clock.pair(
                lambda: noop(spark.read.parquet(plain_dir).where(F.col("day") == day)),  # noqa: B023
                lambda: noop(lhs.read(lh, spark, table, where=where)),  # noqa: B023
                flip,
            )
            if i:
                r_plain.append(rp)
                r_lake.append(rl)
                day_rows = lhs.read(lh, spark, table, where=where).count()
                plain_day = spark.read.parquet(plain_dir).where(F.col("day") == day).count()
                if day_rows != plain_day:
                    raise AssertionError(f"one day: {day_rows} rows vs plain {plain_day}")
            shutil.rmtree(plain_dir, ignore_errors=True)
            with lh.begin() as txn:
                txn.drop_table(table)
        lh.expire_versions(keep_last=1, grace=timedelta(0))
        lh.close()
        df.unpersist()
        return {
            "rows": rows,
            "repeats": repeats,
            "cores": spark.sparkContext.defaultParallelism,
            "files": files,
            "day_rows": day_rows,
            **{label: summary(*w) for label, w in writes.items()},
            "read": summary(r_plain, r_lake),
        }
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
        if root is None:
            shutil.rmtree(tmp, ignore_errors=True)
        if own_spark:
            spark.stop()


def run_merge(
    rows: int = 3_000_000,
    repeats: int = 3,
    root: str | None = None,
    spark: Any = None,
    merge_rows: int = 1000,
    primary_key: bool = True,
) -> dict[str, Any]:
    """Merge by key vs a plain write of the same rows (see ``--merge``): each repeat
    draws a new source (``merge_rows`` orders, half of them existing order ids, half
    new ones), cached, and times ``lhs.merge(lh, src, keyed, on="order_id")`` and
    ``lhs.write(lh, src, plain)`` back to back (the order alternating). The row
    counts after each are checked. ``primary_key=False`` (``--merge-no-key``): the
    merged table has no primary key (the merge then matches by scanning it)."""
    import numpy as np
    import pyarrow as pa

    import lakehouse
    import lakehouse.spark as lhs
    from lakehouse.spark.types import arrow_schema

    own_spark = spark is None
    if spark is None:
        spark = lhs.local_session("lakehouse-spark-bench")
    tmp = root or tempfile.mkdtemp(prefix="lh-spark-bench-")
    try:
        df = orders_frame(spark, rows).cache()
        df.count()
        lh = lakehouse.open(os.path.join(tmp, "lh"))
        schema = arrow_schema(df.schema)
        schema = schema.set(0, pa.field("order_id", pa.int64(), nullable=False))
        keyed, plain = "bench.keyed", "bench.plain"
        with lh.begin() as txn:
            txn.create_namespace("bench")
            txn.create_table(keyed, schema, primary_key=["order_id"] if primary_key else None)
            txn.create_table(plain, schema)
        setup: dict[str, float] = {}
        for table in (keyed, plain):
            t0 = time.perf_counter()
            lhs.write(lh, df, table)
            setup[table] = time.perf_counter() - t0
        df.unpersist()
        clock = Clock(spark)
        w: list[tuple[float, float]] = []
        m: list[tuple[float, float]] = []
        inserted = 0
        for i in range(repeats + 1):  # round 0 warms the JVM up and is not counted
            rng = np.random.default_rng(100 + i)
            half = merge_rows // 2
            new = (1 << 40) + i * merge_rows + np.arange(merge_rows - half)
            ids = rng.permutation(np.concatenate([rng.choice(rows, half, replace=False), new]))
            src = orders_of(spark.createDataFrame([(int(x),) for x in ids], "id long"), 7 + i)
            src = src.cache()
            src.count()
            before = (lh.table_stats(keyed).rows, lh.table_stats(plain).rows)
            wp, wl = clock.pair(
                lambda: lhs.write(lh, src, plain),  # noqa: B023
                lambda: lhs.merge(lh, src, keyed, on="order_id"),  # noqa: B023
                i % 2 == 1,
            )
            after = (lh.table_stats(keyed).rows, lh.table_stats(plain).rows)
            if after != (before[0] + len(new), before[1] + merge_rows):
                raise AssertionError(f"rows (keyed, plain): {before} before, {after} after")
            inserted += len(new)
            src.unpersist()
            if i:
                w.append(wp)
                m.append(wl)
        lh.close()
        return {
            "rows": rows,
            "repeats": repeats,
            "merge_rows": merge_rows,
            "primary_key": primary_key,
            "cores": spark.sparkContext.defaultParallelism,
            "setup_write_s": setup,
            "inserted": inserted,
            "merge": summary(w, m),
        }
    finally:
        if root is None:
            shutil.rmtree(tmp, ignore_errors=True)
        if own_spark:
            spark.stop()


def format_table(res: dict[str, Any]) -> str:
    lines = [
        f"{res['rows']:,} rows, {res['repeats']} repeats, local[{res['cores']}]",
        f"{'':18} {'plain s (median, min-max)':>26} {'lakehouse s':>20} {'ratio':>6} "
        f"{'range':>10} {'CPU ratio':>10}",
    ]
    for key, label in (
        ("write", "write"),
        ("read", "read"),
        ("read_1pct_deleted", "read, 1% deleted"),
        ("write_distribution_none", "write, dist. none"),
        ("write_vs_plain_repartition", "write vs repart."),
        ("merge", "merge vs write"),
    ):
        if key not in res:
            continue
        r = res[key]
        p, q = r["plain_s"], r["lakehouse_s"]
        lo, hi = r["ratio_range"]
        cpu = f"{r['cpu_ratio']:.2f}x" if "cpu_ratio" in r else "-"
        lines.append(
            f"{label:18} {p['median']:>9.2f} ({p['min']:.2f}-{p['max']:.2f}) "
            f"{q['median']:>10.2f} ({q['min']:.2f}-{q['max']:.2f}) "
            f"{r['ratio']:>5.2f}x {lo:>4.2f}-{hi:.2f} {cpu:>10}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m lakehouse.spark.bench", description=__doc__)
    ap.add_argument("--rows", type=int, help="default 3,000,000 (1,000,000 with --sql)")
    ap.add_argument("--repeats", type=int, help="default 5 (3 with --rowops)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument(
        "--partitioned",
        action="store_true",
        help="the partitioned-table benchmark (day-partitioned write, read of one day)",
    )
    ap.add_argument(
        "--merge",
        action="store_true",
        help="merge of --merge-rows keyed rows vs a plain write of them (issue 22)",
    )
    ap.add_argument("--merge-rows", type=int, default=1000)
    ap.add_argument(
        "--merge-no-key", action="store_true", help="--merge into a table without a primary key"
    )
    ap.add_argument(
        "--rowops",
        action="store_true",
        help="row operations vs plain Spark on the same files, driver memory (issue 25)",
    )
    ap.add_argument(
        "--sql",
        action="store_true",
        help="SQL statements vs the equivalent Python calls on the same data (issue 23)",
    )
    args = ap.parse_args(argv)
    repeats = args.repeats if args.repeats is not None else 3 if args.rowops else 5
    if args.rows is None:
        args.rows = 1_000_000 if args.sql else 3_000_000
    if args.sql:
        from lakehouse.spark.bench_sql import format_sql, run_sql

        res = run_sql(args.rows, repeats, merge_rows=args.merge_rows)
        print(format_sql(res))
    elif args.rowops:
        from lakehouse.spark.bench_rowops import format_rowops, run_rowops

        res = run_rowops(args.rows, repeats, merge_rows=args.merge_rows)
        print(format_rowops(res))
    elif args.merge:
        res = run_merge(
            args.rows, repeats, merge_rows=args.merge_rows, primary_key=not args.merge_no_key
        )
        key = "no primary key" if args.merge_no_key else "primary_key=[order_id]"
        print(f"merge of {args.merge_rows:,} rows ({key}) vs lhs.write of them (plain = the write)")
        print(format_table(res))
    else:
        res = (run_partitioned if args.partitioned else run)(args.rows, repeats)
        print(format_table(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
