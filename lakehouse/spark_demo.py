"""The main job: a PySpark pipeline on a lakehouse in ./demo-data, narrated.

Run with ``python -m lakehouse.spark_demo [--root demo-data] [--scale 1.0]``
(``make demo``). A local Spark (``local[2]``) and a lakehouse on the local
disk (``demo-data/spark-lakehouse``; the store lives in this process, Spark's
executors write and read the Parquet data files):

1. the tree: namespace ``shop``, tables ``customers``, ``orders`` (facts)
   and ``daily_revenue`` (an aggregate), a SQL view;
2. ingestion: customers, then four daily loads of orders (~3M rows), the
   last two at once from two driver threads (appends never conflict);
3. one SERIALIZABLE transaction writes the next load *and* recomputes the
   aggregate from the orders it reads; a late load committed meanwhile makes
   the first attempt conflict (the aggregate would miss it), the retry
   commits both tables as one version;
4. deletes (cancelled orders), updates (a price correction) and a merged
   change batch (status updates plus late orders), executed by Spark; then the
   same in SQL (``lakehouse.spark.sql``): a ``MERGE INTO`` with a condition, and
   ``BEGIN ... COMMIT`` across two tables through a ``SqlSession`` (one version);
5. time travel in Spark SQL through ``ns.table@vN`` views, and in
   ``lakehouse.spark.sql`` with ``VERSION AS OF``;
6. a bad load caught by a quality check and rolled back (``lh.rollback``);
7. compaction (``txn.compact``) and version expiration.

Every step prints what it did, with row counts and timings.
"""

from __future__ import annotations

import argparse
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pyarrow as pa

import lakehouse
from lakehouse import Isolation

CUSTOMERS = pa.schema(
    [
        pa.field("customer_id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("country", pa.string()),
        ("segment", pa.string()),
        ("signup_date", pa.date32()),
    ]
)
ORDERS = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        pa.field("customer_id", pa.int64(), nullable=False),
        ("product_id", pa.int32()),
        ("quantity", pa.int32()),
        ("unit_price", pa.decimal128(10, 2)),
        ("total", pa.decimal128(12, 2)),
        ("status", pa.string()),
        ("channel", pa.string()),
        ("country", pa.string()),
        ("placed_at", pa.timestamp("us", tz="UTC")),
    ]
)
DAILY = pa.schema(
    [
        pa.field("day", pa.date32(), nullable=False),
        pa.field("country", pa.string()),
        ("orders", pa.int64()),
        ("revenue", pa.decimal128(22, 2)),
    ]
)
COUNTRIES = ["DE", "FR", "US", "GB", "JP", "BR", "IN", "ES", "IT", "NL"]
STATUSES = ["placed", "paid", "shipped", "delivered", "cancelled"]
CHANNELS = ["web", "app", "store", "partner"]
DAY_S = 86_400
START = 1_735_689_600  # 2025-01-01T00:00:00Z


def say(text: str = "") -> None:
    print(text, flush=True)


@contextmanager
def step(label: str, clock: dict[str, float]) -> Iterator[None]:
    t = time.perf_counter()
    yield
    clock[label] = time.perf_counter() - t


def orders_for_days(spark: Any, first_id: int, rows: int, day0: int, days: int, seed: int) -> Any:
    """``rows`` orders placed on days ``day0 .. day0+days-1`` (deterministic)."""
    from pyspark.sql import functions as F

    def pick(values: list[str], salt: int) -> Any:
        arr = F.array(*[F.lit(v) for v in values])
        return F.element_at(
            arr, (F.abs(F.hash(F.col("id"), F.lit(salt))) % len(values) + 1).cast("int")
        )

    h = F.abs(F.hash(F.col("id"), F.lit(seed)))
    price = ((F.col("product_id") % 400) + F.lit(0.99)).cast("decimal(10,2)")
    return (
        spark.range(first_id, first_id + rows, numPartitions=4)
        .select(
            F.col("id").alias("order_id"),
            (h % 200_000).alias("customer_id"),
            (F.abs(F.hash(F.col("id"), F.lit(seed + 1))) % 5_000).cast("int").alias("product_id"),
            (F.abs(F.hash(F.col("id"), F.lit(seed + 2))) % 5 + 1).cast("int").alias("quantity"),
            pick(STATUSES, seed + 3).alias("status"),
            pick(CHANNELS, seed + 4).alias("channel"),
            pick(COUNTRIES, seed + 5).alias("country"),
            F.timestamp_seconds(
                F.lit(START + day0 * DAY_S)
                + (F.abs(F.hash(F.col("id"), F.lit(seed + 6))) % (days * DAY_S))
            ).alias("placed_at"),
            F.col("id").alias("id"),
        )
        .withColumn("unit_price", price)
        .withColumn("total", (F.col("unit_price") * F.col("quantity")).cast("decimal(12,2)"))
        .drop("id")
    )


def daily_revenue(orders: Any) -> Any:
    from pyspark.sql import functions as F

    return orders.groupBy(F.to_date("placed_at").alias("day"), "country").agg(
        F.count(F.lit(1)).alias("orders"), F.sum("total").alias("revenue")
    )


def main(root: str = "demo-data", scale: float = 1.0, spark: Any = None) -> dict[str, Any]:
    """Run the pipeline (see module doc); returns a summary (row counts, versions).
    ``spark``: a session to use (left running); default: a new local one."""
    from pyspark.sql import functions as F

    import lakehouse.spark as lhs

    total_t = time.perf_counter()
    clock: dict[str, float] = {}
    path = os.path.join(root, "spark-lakehouse")
    shutil.rmtree(path, ignore_errors=True)
    n: Callable[[float], int] = lambda rows: max(1000, int(rows * scale))  # noqa: E731

    say(f"Spark pipeline demo: a lakehouse in {path}/, PySpark on local[2]\n")
    with step("spark", clock):
        own_spark = spark is None
        if spark is None:
            spark = lhs.local_session("lakehouse-spark-demo", master="local[2]")
    say(f"0. Local Spark {spark.version} started in {clock['spark']:.1f}s.")
    lh = lakehouse.open(path)

    # 1. the tree ----------------------------------------------------------------------------
    with lh.begin() as txn:
        txn.create_namespace("shop", {"owner": "analytics"})
        txn.create_table("shop.customers", CUSTOMERS, primary_key=["customer_id"])
        txn.create_table(
            "shop.orders", ORDERS, primary_key=["order_id"], partition_by=["day(placed_at)"]
        )
        txn.create_table("shop.daily_revenue", DAILY, partition_by=["month(day)"])
        txn.create_view(
            "shop.big_orders",
            "SELECT order_id, customer_id, total FROM shop.orders WHERE total > 1900",
            referenced=["shop.orders"],
        )
    say(
        f"1. Version {lh.version}: namespace shop with customers, orders (partitioned by "
        "day(placed_at)), daily_revenue (by month(day)) and a view."
    )
    say()

    # 2. ingestion ----------------------------------------------------------------------------
    customers = spark.range(0, n(200_000), numPartitions=2).select(
        F.col("id").alias("customer_id"),
        F.concat(F.lit("customer-"), F.col("id").cast("string")).alias("name"),
        F.element_at(
            F.array(*[F.lit(c) for c in COUNTRIES]), (F.col("id") % 10 + 1).cast("int")
        ).alias("country"),
        F.when(F.col("id") % 20 == 0, "enterprise").otherwise("consumer").alias("segment"),
        F.date_add(F.lit("2020-01-01").cast("date"), (F.col("id") % 1800).cast("int")).alias(
            "signup_date"
        ),
    )
    with step("customers", clock):
        v = lhs.write(lh, customers, "shop.customers")
    say(
        f"2. Loaded {lh.table_stats('shop.customers').rows:,} customers in "
        f"{clock['customers']:.1f}s (version {v})."
    )
    loads = [(0, n(1_000_000), 0), (1, n(800_000), 1), (2, n(600_000), 2), (3, n(600_000), 3)]
    next_id = 0
    starts = []
    for _, rows, _ in loads:
        starts.append(next_id)
        next_id += rows
    for i in (0, 1):
        _, rows, day = loads[i]
        with step(f"load{i}", clock):
            v = lhs.write(
                lh, orders_for_days(spark, starts[i], rows, day * 7, 7, 11 + i), "shop.orders"
            )
        say(
            f"   Load {i + 1}: {rows:,} orders (week {day + 1}) in {clock[f'load{i}']:.1f}s "
            f"-> version {v}."
        )
    results: dict[int, Any] = {}

    def load(i: int) -> None:
        _, rows, day = loads[i]
        t = time.perf_counter()
        ver = lhs.write(
            lh, orders_for_days(spark, starts[i], rows, day * 7, 7, 11 + i), "shop.orders"
        )
        results[i] = (ver, time.perf_counter() - t)

    with step("concurrent", clock):
        threads = [threading.Thread(target=load, args=(i,)) for i in (2, 3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    for i in (2, 3):
        ver, took = results[i]
        say(
            f"   Load {i + 1}: {loads[i][1]:,} orders from a driver thread in {took:.1f}s "
            f"-> version {ver}."
        )
    say(
        f"   Loads 3 and 4 ran at once ({clock['concurrent']:.1f}s together): appends never "
        "conflict;"
    )
    st = lh.table_stats("shop.orders")
    say(f"   orders now holds {st.rows:,} rows in {st.files} files.")
    say()

    # 3. a multi-table SERIALIZABLE transaction --------------------------------------------------
    rows5 = n(500_000)
    load5 = orders_for_days(spark, next_id, rows5, 28, 7, 99).cache()
    load5.count()
    next_id += rows5
    late = pa.table(
        {
            "order_id": pa.array(range(10_000_000, 10_000_050), pa.int64()),
            "customer_id": pa.array([7] * 50, pa.int64()),
            "status": pa.array(["placed"] * 50),
            "country": pa.array(["DE"] * 50),
            "total": pa.array([10] * 50, pa.decimal128(12, 2)),
            "placed_at": pa.array(
                [(START + 27 * DAY_S) * 1_000_000] * 50, pa.timestamp("us", "UTC")
            ),
        }
    )
    attempt = 0
    with step("serializable", clock):
        while True:
            attempt += 1
            txn = lh.begin(Isolation.SERIALIZABLE)
            lhs.write(lh, load5, "shop.orders", txn=txn)
            agg = daily_revenue(lhs.read(lh, spark, "shop.orders", txn=txn))
            lhs.write(lh, agg, "shop.daily_revenue", mode="overwrite", txn=txn)
            if attempt == 1:  # a late load lands while the aggregate is being computed
                with lh.begin() as other:
                    other.append("shop.orders", late)
            try:
                v_serial = txn.commit()
                break
            except lakehouse.RetryableConflict as exc:
                say(f"3. SERIALIZABLE attempt {attempt} refused (RetryableConflict): {exc}.")
                say(
                    "   (a late load of 50 orders committed meanwhile; the aggregate would miss it)"
                )
    load5.unpersist()
    rec = lh.version_info(v_serial)
    days = lh.table_stats("shop.daily_revenue").rows
    say(
        f"   Attempt {attempt} committed version {v_serial} in {clock['serializable']:.1f}s "
        "(both attempts):"
    )
    say(
        f"   {rows5:,} new orders and {days} (day, country) aggregate rows, one version: "
        f"{rec.summary()}"
    )
    lhs.register_views(lh, spark)
    totals = spark.sql(
        "SELECT (SELECT sum(orders) FROM `shop.daily_revenue`) AS agg, "
        "(SELECT count(*) FROM `shop.orders`) AS facts"
    ).first()
    say(
        f"   Check in Spark SQL: sum(daily_revenue.orders) = {totals.agg:,} = count(orders) = "
        f"{totals.facts:,}."
    )
    say()
    v_before_changes = lh.version

    # 4. delete, update, merge -------------------------------------------------------------------
    with step("delete", clock):
        deleted = lhs.delete(
            lh, spark, "shop.orders", "status = 'cancelled' AND placed_at < '2025-01-15'"
        )
    st = lh.table_stats("shop.orders")
    say(
        f"4. Deleted {deleted:,} cancelled orders of the first two weeks in {clock['delete']:.1f}s "
        f"(deletion vectors: {st.deleted_rows:,} rows marked, no file rewritten)."
    )
    with step("update", clock):
        # values are Spark SQL over the old row: total uses the corrected price
        price = "CAST(unit_price * 0.9 AS decimal(10,2))"
        updated = lhs.update(
            lh,
            spark,
            "shop.orders",
            "product_id = 42",
            {"unit_price": price, "total": f"CAST({price} * quantity AS decimal(12,2))"},
        )
    say(
        f"   Price correction for product 42: {updated:,} orders updated in "
        f"{clock['update']:.1f}s (lhs.update: one scan of the table)."
    )
    orders = lhs.read(lh, spark, "shop.orders")  # after the price correction
    changes = (
        orders.where("status = 'shipped' AND order_id % 10 = 3")
        .withColumn("status", F.lit("delivered"))
        .unionByName(orders_for_days(spark, next_id, n(20_000), 34, 1, 123))
    )
    with step("merge", clock):
        res = lhs.merge(lh, changes, "shop.orders", on=["order_id"])
    say(
        f"   Change batch merged in {clock['merge']:.1f}s: {res.updated:,} shipped orders now "
        "delivered, "
        f"{res.inserted:,} late orders inserted."
    )
    # the late orders landed in February: recompute that month's aggregates only
    with step("refresh", clock):
        feb = lhs.read(lh, spark, "shop.orders", where="placed_at >= '2025-02-01'")
        lhs.write(lh, daily_revenue(feb), "shop.daily_revenue", mode="replace_partitions")
    month = lh.read("shop.daily_revenue", where="day >= DATE '2025-02-01'")
    say(
        f"   February's revenue recomputed in {clock['refresh']:.1f}s from a read pruned to "
        f"its days' files; replace_partitions rewrote that month only ({month.num_rows} rows)."
    )
    # the same kinds of change in SQL: lakehouse.spark.sql parses the statement and runs it
    # through the calls above (a subquery as the source; the first WHEN clause has a condition)
    customers_n = n(200_000)
    with step("sql_merge", clock):
        m = lhs.sql(
            lh,
            spark,
            "MERGE INTO shop.customers t USING (SELECT id AS customer_id, "
            "concat('customer-', CAST(id AS STRING)) AS name, 'NL' AS country, "
            "'enterprise' AS segment, DATE '2025-02-03' AS signup_date "
            f"FROM range({customers_n - 50}, {customers_n + 50})) s "
            "ON t.customer_id = s.customer_id "
            "WHEN MATCHED AND t.segment <> s.segment THEN UPDATE SET segment = s.segment "
            "WHEN NOT MATCHED THEN INSERT *",
        ).collect()[0]
    say(
        "   In SQL (lakehouse.spark.sql): MERGE INTO shop.customers t USING (SELECT ... FROM "
        "range(...)) s"
    )
    say(
        "   ON t.customer_id = s.customer_id WHEN MATCHED AND t.segment <> s.segment THEN UPDATE "
        "SET segment = s.segment"
    )
    say(
        f"   WHEN NOT MATCHED THEN INSERT *: {m.num_updated_rows:,} customers moved to enterprise, "
        f"{m.num_inserted_rows:,} new ones inserted in {clock['sql_merge']:.1f}s."
    )
    moving = "segment = 'consumer' AND customer_id % 97 = 0"
    with step("sql_transaction", clock), lhs.SqlSession(lh, spark) as session:
        session.sql(
            "CREATE TABLE shop.segment_changes "
            "(customer_id BIGINT NOT NULL, segment STRING, changed_on DATE)"
        )
        v_created = lh.version
        session.sql("BEGIN")
        logged = session.sql(
            "INSERT INTO shop.segment_changes SELECT customer_id, 'enterprise', DATE '2025-02-05' "
            f"FROM shop.customers WHERE {moving}"
        ).collect()[0]
        moved = session.sql(f"UPDATE shop.customers SET segment = 'enterprise' WHERE {moving}")
        moved_n = moved.collect()[0].num_affected_rows
        session.sql("COMMIT")
    v_txn = lh.version
    say(
        "   A SqlSession: CREATE TABLE shop.segment_changes, then BEGIN; INSERT INTO "
        "shop.segment_changes SELECT ..."
    )
    say(
        "   FROM shop.customers WHERE ...; UPDATE shop.customers SET segment = 'enterprise' "
        "WHERE ...; COMMIT:"
    )
    say(
        f"   {logged.num_affected_rows:,} changes logged and {moved_n:,} customers updated in "
        f"{clock['sql_transaction']:.1f}s as one version ({v_created} -> {v_txn}: "
        f"{lh.version_info(v_txn).summary()})."
    )
    say()

    # 5. time travel in Spark SQL ---------------------------------------------------------------
    names = lhs.register_views(lh, spark, version=v_before_changes) + lhs.register_views(lh, spark)
    q = "SELECT status, count(*) AS n FROM `{}` GROUP BY status ORDER BY status"
    then = {
        r.status: r.n for r in spark.sql(q.format(f"shop.orders@v{v_before_changes}")).collect()
    }
    now = {r.status: r.n for r in spark.sql(q.format("shop.orders")).collect()}
    say(
        f"5. Spark SQL over temp views ({len(names)} registered, e.g. "
        f"`shop.orders@v{v_before_changes}`):"
    )
    say(f"   {'status':10} {'v' + str(v_before_changes):>10} {'now':>10}")
    for s in STATUSES:
        say(f"   {s:10} {then.get(s, 0):>10,} {now.get(s, 0):>10,}")
    q = (
        f"SELECT status, count(*) AS n FROM shop.orders VERSION AS OF {v_before_changes} "
        "GROUP BY status"
    )
    in_sql = {r.status: r.n for r in lhs.sql(lh, spark, q).collect()}
    say(f"   In lakehouse.spark.sql, no views: {q}")
    same = "the same counts as" if in_sql == then else "NOT the counts of"
    say(
        f"   -> {sum(in_sql.values()):,} orders, {in_sql.get('delivered', 0):,} delivered "
        f"({same} the view's)."
    )
    big = spark.sql("SELECT count(*) AS n FROM `shop.big_orders`").first().n
    say(f"   The lakehouse view shop.big_orders runs in Spark too: {big:,} orders over 1900.")
    ts = lh.version_info(v_before_changes).created_at
    at_time = lhs.read(lh, spark, "shop.orders", timestamp=ts).count()
    say(f"   read(timestamp={ts:%H:%M:%S.%f}) -> version {lh.version_at(ts)}, {at_time:,} rows.")
    say()

    # 6. a load repeating order ids is refused; a bad load and its rollback ----------------------
    good = lh.version
    repeat = orders_for_days(spark, 0, n(200_000), 40, 1, 7)
    try:
        lhs.write(lh, repeat, "shop.orders")
        refused = "accepted?!"
    except lakehouse.DuplicateKey as exc:
        refused = str(exc).split(":")[0]
    fresh = 1_000_000_000  # order ids no load used
    bad = orders_for_days(spark, fresh, n(200_000), 40, 1, 7).withColumn("quantity", F.lit(-1))
    with step("bad", clock):
        lhs.write(lh, bad, "shop.orders")
    q = "SELECT count(*) AS bad FROM `shop.orders` WHERE quantity <= 0"
    lhs.register_views(lh, spark)
    found = spark.sql(q).first().bad
    dupes = (
        lhs.read(lh, spark, "shop.orders").groupBy("order_id").count().where("count > 1").count()
    )
    say(
        f"6. A load of {n(200_000):,} rows repeating order ids is refused by the primary key "
        f"({refused}); version {good} stays."
    )
    say(
        f"   Load 6 ({n(200_000):,} new orders, version {lh.version}) fails the quality check: "
        f"{found:,} rows with quantity <= 0"
    )
    say(f"   ({dupes:,} duplicate order ids). lh.rollback({good}):")
    restored = lh.rollback(good)
    say(
        f"   version {restored} ({lh.version_info(restored).summary()}); "
        f"{lh.table_stats('shop.orders').rows:,} rows again."
    )
    say()

    # 7. compaction and expiration ---------------------------------------------------------------
    before = lh.table_stats("shop.orders")
    with step("compact", clock), lh.begin() as txn:
        cres = txn.compact("shop.orders")
    after = lh.table_stats("shop.orders")
    say(
        f"7. Compaction rewrote {cres.files_removed} files into {cres.files_added} "
        f"({cres.rows:,} rows) "
        f"in {clock['compact']:.1f}s:"
    )
    say(
        f"   {before.files} files / {before.deleted_rows:,} deleted rows -> {after.files} files / "
        f"{after.deleted_rows:,}; rows unchanged ({after.rows:,})."
    )
    data_dir = lh.data_location()[0][len("file://") :]
    count_files: Callable[[], int] = lambda: sum(len(f) for _, _, f in os.walk(data_dir))  # noqa: E731
    files_before = count_files()
    # no reader elsewhere: no grace, so the files only expired versions used go now
    oldest = lh.expire_versions(keep_last=1, grace=timedelta(0))
    say(
        f"   expire_versions(keep_last=1, grace=0): versions {oldest}..{lh.version} remain; "
        "data files "
        "on disk "
        f"{files_before} -> {count_files()}."
    )
    try:
        lhs.read(lh, spark, "shop.orders", version=v_before_changes)
    except lakehouse.VersionExpired as exc:
        say(f"   Reading version {v_before_changes} now raises VersionExpired: {exc}.")
    say()
    say("Timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in clock.items()))
    say(f"Done in {time.perf_counter() - total_t:.0f}s. Latest version {lh.version}; tables:")
    for t in ("shop.customers", "shop.orders", "shop.daily_revenue"):
        ts_ = lh.table_stats(t)
        say(f"   {t:20} {ts_.rows:>10,} rows {ts_.files:>4} files {ts_.bytes / 1e6:>8.1f} MB")
    summary = {
        "orders": lh.table_stats("shop.orders").rows,
        "daily_revenue": lh.table_stats("shop.daily_revenue").rows,
        "version": lh.version,
        "serializable_attempts": attempt,
        "deleted": deleted,
        "rolled_back_to": good,
        "oldest": oldest,
    }
    lh.close()
    if own_spark:
        spark.stop()
    return summary


def cli(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m lakehouse.spark_demo", description=__doc__)
    ap.add_argument("--root", default="demo-data", help="directory for the lakehouse")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the order counts")
    args = ap.parse_args(argv)
    main(args.root, args.scale)


if __name__ == "__main__":
    cli()
