"""lakehouse.spark on a local-directory lakehouse: the API.md "Spark" calls.

One SparkSession for the whole run (tests/spark_fixtures.py). Data is small
(hundreds to thousands of rows) so each test costs a few Spark jobs.
"""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pytest

import lakehouse
from lakehouse import Isolation, NotFound

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
from pyspark.sql import functions as F
from pyspark.sql import types as T

import lakehouse.spark as lhs
from lakehouse.spark import SparkJobError

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

ORDERS = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("customer", pa.string()),
        ("qty", pa.int32()),
        ("total", pa.decimal128(12, 2)),
        ("placed_at", pa.timestamp("us", tz="UTC")),
    ]
)


#: every write makes data files (no inlined rows)
FILES_ONLY = {"inline.max_rows": "0"}


@pytest.fixture
def lh(tmp_path):
    h = lakehouse.open(str(tmp_path / "lh"), kv_options={"fsync": False})
    with h.begin() as txn:
        txn.create_namespace("sales")
        # files only: these tests are about what executors write and read (small
        # writes would be inlined; tests/test_spark_inline.py covers those)
        txn.create_table("sales.orders", ORDERS, FILES_ONLY)
    yield h
    h.close()


def orders(spark, start, stop, *, customer="c"):
    return spark.range(start, stop).select(
        F.col("id").alias("order_id"),
        F.concat(F.lit(customer), (F.col("id") % 7).cast("string")).alias("customer"),
        (F.col("id") % 5).cast("int").alias("qty"),
        (F.col("id") * 1.25).cast("decimal(12,2)").alias("total"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id")).alias("placed_at"),
    )


def ids(frame):
    return sorted(r[0] for r in frame.select("order_id").collect())


def data_files_on_disk(lh, table="sales.orders"):
    base = lh.data_location()[0][len("file://") :]
    with lh.begin() as txn:
        d = os.path.join(base, txn.data_dir(table))
    out = []
    for root, _, files in os.walk(d):
        out += [os.path.join(root, f) for f in files]
    return sorted(out)


# -- write -------------------------------------------------------------------------------------
def test_write_append_returns_version_and_reads_back(spark, lh):
    v = lhs.write(lh, orders(spark, 0, 500), "sales.orders")
    assert v == lh.version == 2
    assert lh.table_stats("sales.orders").rows == 500
    got = lhs.read(lh, spark, "sales.orders")
    assert ids(got) == list(range(500))
    # the Python API reads the same rows and types
    t = lh.read("sales.orders")
    assert [f.type for f in t.schema] == [f.type for f in ORDERS]
    assert sorted(t.column("order_id").to_pylist()) == list(range(500))
    assert lhs.write(lh, orders(spark, 500, 600), "sales.orders") == 3
    assert lh.table_stats("sales.orders").rows == 600


def test_spark_and_python_writes_in_one_transaction_make_one_version(spark, lh):
    before = lh.version
    with lh.begin() as txn:
        assert lhs.write(lh, orders(spark, 0, 100), "sales.orders", txn=txn) is None
        txn.append("sales.orders", pa.table({"order_id": pa.array([1000, 1001], pa.int64())}))
        txn.create_table("sales.totals", pa.schema([("customer", pa.string()), ("n", pa.int64())]))
        lhs.write(
            lh,
            spark.createDataFrame([("c1", 3)], "customer string, n long"),
            "sales.totals",
            txn=txn,
        )
        assert lh.version == before  # nothing visible before the commit
    assert lh.version == before + 1
    assert lh.table_stats("sales.orders").rows == 102
    assert lh.read("sales.totals").to_pylist() == [{"customer": "c1", "n": 3}]


def test_write_rolled_back_with_the_callers_transaction(spark, lh):
    txn = lh.begin()
    lhs.write(lh, orders(spark, 0, 100), "sales.orders", txn=txn)
    txn.rollback()
    assert lh.table_stats("sales.orders").rows == 0
    assert [f for f in data_files_on_disk(lh) if f.endswith(".parquet")] == []


def test_overwrite_all_and_where(spark, lh):
    lhs.write(lh, orders(spark, 0, 100), "sales.orders")
    lhs.write(lh, orders(spark, 100, 150), "sales.orders", mode="overwrite")
    assert ids(lhs.read(lh, spark, "sales.orders")) == list(range(100, 150))
    # replace only the rows with order_id < 120; the new rows must match too
    lhs.write(lh, orders(spark, 0, 5), "sales.orders", mode="overwrite", where="order_id < 120")
    assert ids(lhs.read(lh, spark, "sales.orders")) == [0, 1, 2, 3, 4, *range(120, 150)]
    v = lh.version
    with pytest.raises(ValueError, match="overwrite condition"):
        lhs.write(
            lh, orders(spark, 0, 500), "sales.orders", mode="overwrite", where="order_id < 120"
        )
    assert lh.version == v
    assert lh.table_stats("sales.orders").rows == 35


def test_write_argument_errors(spark, lh):
    df = orders(spark, 0, 3)
    with pytest.raises(ValueError, match="mode"):
        lhs.write(lh, df, "sales.orders", mode="upsert")
    with pytest.raises(ValueError, match="where"):
        lhs.write(lh, df, "sales.orders", where="order_id > 1")
    with pytest.raises(TypeError, match="DataFrame"):
        lhs.write(lh, [1, 2], "sales.orders")
    with pytest.raises(NotFound):
        lhs.write(lh, df, "sales.nope")
    with pytest.raises(ValueError, match="bad where"):
        lhs.write(lh, df, "sales.orders", mode="overwrite", where="no_such_col > 1")
    with pytest.raises(ValueError, match="bad where"):
        lhs.write(lh, df, "sales.orders", mode="overwrite", where="order_id >")
    with pytest.raises(TypeError, match="where"):
        lhs.write(lh, df, "sales.orders", mode="overwrite", where=F.col("order_id") > 1)
    assert lh.version == 1


def test_overwrite_where_conflicts_with_a_concurrent_matching_insert(spark, lh):
    lhs.write(lh, orders(spark, 0, 20), "sales.orders")
    txn = lh.begin()
    lhs.write(
        lh, orders(spark, 0, 5), "sales.orders", mode="overwrite", where="order_id < 10", txn=txn
    )
    with lh.begin() as other:  # commits a row the overwrite's where matches
        other.append("sales.orders", pa.table({"order_id": pa.array([7], pa.int64())}))
    with pytest.raises(lakehouse.RetryableConflict):
        txn.commit()
    assert lh.table_stats("sales.orders").rows == 21


# -- DataFrame vs table ------------------------------------------------------------------------
@pytest.mark.parametrize("ansi", ["true", "false"])
def test_schema_matching_before_any_job(spark, lh, ansi):
    def boom(x):
        raise RuntimeError("the data was evaluated")

    poisoned = F.udf(boom, "long")
    base = orders(spark, 0, 3).withColumn("order_id", poisoned(F.col("order_id")))
    old = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", ansi)
    try:
        with pytest.raises(ValueError, match=r"'order_id'.*missing"):
            lhs.write(lh, base.drop("order_id"), "sales.orders")
        with pytest.raises(ValueError, match="'extra'"):
            lhs.write(lh, base.withColumn("extra", F.lit(1)), "sales.orders")
        with pytest.raises(ValueError, match=r"'qty'.*cannot be cast safely"):
            lhs.write(lh, base.withColumn("qty", F.col("qty").cast("long")), "sales.orders")
        with pytest.raises(ValueError, match=r"'customer'.*cannot be cast safely"):
            lhs.write(lh, base.withColumn("customer", F.lit(1)), "sales.orders")
        with pytest.raises(ValueError, match="'total'"):
            lhs.write(lh, base.withColumn("total", F.col("total").cast("double")), "sales.orders")
        with pytest.raises(ValueError, match="did you mean 'qty'"):
            lhs.write(lh, base.withColumnRenamed("qty", "QTY"), "sales.orders")
    finally:
        spark.conf.set("spark.sql.ansi.enabled", old)
    assert lh.version == 1


def test_safe_widening_and_missing_nullable_columns(spark, lh):
    df = spark.createDataFrame(
        [(1, 2), (2, None)],
        T.StructType(
            [
                T.StructField("order_id", T.IntegerType(), False),
                T.StructField("qty", T.ShortType(), True),
            ]
        ),
    ).withColumn("total", F.lit(7).cast("decimal(5,1)"))
    lhs.write(lh, df, "sales.orders")
    t = lh.read("sales.orders").sort_by("order_id")
    assert [f.type for f in t.schema] == [f.type for f in ORDERS]
    assert t.column("qty").to_pylist() == [2, None]
    assert t.column("customer").to_pylist() == [None, None]
    assert [str(x) for x in t.column("total").to_pylist()] == ["7.00", "7.00"]


def test_null_in_non_nullable_column_fails_and_leaves_nothing(spark, lh):
    df = orders(spark, 0, 50).withColumn(
        "order_id", F.when(F.col("order_id") == 42, F.lit(None)).otherwise(F.col("order_id"))
    )
    with pytest.raises(ValueError, match=r"'order_id'.*not nullable"):
        lhs.write(lh, df, "sales.orders")
    assert lh.version == 1
    assert data_files_on_disk(lh) == []


# -- failures ----------------------------------------------------------------------------------
def test_failed_job_commits_nothing_and_leaves_no_file(spark, lh):
    def explode(x):
        if x == 777:
            raise RuntimeError("executor blew up")
        return x

    bad = (
        orders(spark, 0, 1000, customer="x")
        .withColumn("order_id", F.udf(explode, "long")(F.col("order_id")))
        .repartition(4)
    )
    lhs.write(lh, orders(spark, 5000, 5010), "sales.orders")
    v = lh.version
    with pytest.raises(SparkJobError, match="nothing was committed") as info:
        lhs.write(lh, bad, "sales.orders")
    assert info.value.__cause__ is not None
    assert lh.version == v
    assert ids(lhs.read(lh, spark, "sales.orders")) == list(range(5000, 5010))
    registered = {os.path.basename(f.path) for f in lh.list_data_files("sales.orders")}
    on_disk = {os.path.basename(f) for f in data_files_on_disk(lh)}
    assert on_disk == registered


def test_task_retry_leaves_no_duplicate(spark, lh):
    """A task that dies on its first attempt after writing rows is retried (local[2,2])."""

    def flaky(x):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.attemptNumber() == 0 and ctx.partitionId() == 1 and x % 100 == 99:
            raise RuntimeError("first attempt dies")
        return x

    df = (
        orders(spark, 0, 400)
        .repartition(2)
        .withColumn("order_id", F.udf(flaky, "long")(F.col("order_id")))
    )
    lhs.write(lh, df, "sales.orders")
    assert ids(lhs.read(lh, spark, "sales.orders")) == list(range(400))
    registered = {os.path.basename(f.path) for f in lh.list_data_files("sales.orders")}
    assert {os.path.basename(f) for f in data_files_on_disk(lh)} == registered


# -- read ----------------------------------------------------------------------------------------
def test_read_at_version_and_time(spark, lh):
    lhs.write(lh, orders(spark, 0, 10), "sales.orders")
    v2 = lh.version
    t2 = lh.history()[0].created_at
    lhs.delete(lh, spark, "sales.orders", "order_id < 5")
    lhs.write(lh, orders(spark, 10, 12), "sales.orders")
    assert ids(lhs.read(lh, spark, "sales.orders")) == [5, 6, 7, 8, 9, 10, 11]
    assert ids(lhs.read(lh, spark, "sales.orders", version=v2)) == list(range(10))
    assert ids(lhs.read(lh, spark, "sales.orders", version=1)) == []
    assert ids(lhs.read(lh, spark, "sales.orders", timestamp=t2)) == list(range(10))
    later = t2 + dt.timedelta(hours=1)
    assert ids(lhs.read(lh, spark, "sales.orders", timestamp=later)) == list(range(5, 12))
    with pytest.raises(NotFound):
        lhs.read(lh, spark, "sales.orders", version=99)
    with pytest.raises(NotFound):
        lhs.read(lh, spark, "sales.missing")


def test_read_prunes_columns_and_pushes_filters(spark, lh, capsys):
    lhs.write(lh, orders(spark, 0, 200), "sales.orders")
    lhs.delete(lh, spark, "sales.orders", "order_id % 2 = 0")
    q = lhs.read(lh, spark, "sales.orders").where("qty > 3").select("order_id")
    capsys.readouterr()
    q.explain()  # prints the physical plan
    plan = capsys.readouterr().out
    assert "PushedFilters: [IsNotNull(qty), GreaterThan(qty,3)]" in plan
    assert "ReadSchema: struct<order_id:bigint,qty:int" in plan
    assert ids(q) == [i for i in range(200) if i % 2 and i % 5 > 3]


def test_read_after_rename_and_widening(spark, lh):
    lhs.write(lh, orders(spark, 0, 20), "sales.orders")
    with lh.begin() as txn:
        txn.alter_table("sales.orders", rename_columns={"customer": "buyer"})
    with lh.begin() as txn:
        wider = pa.schema(
            [
                f.with_type(pa.int64()) if f.name == "qty" else f
                for f in txn.describe_table("sales.orders").schema
            ]
        )
        txn.alter_table("sales.orders", schema=wider)
    df = lhs.read(lh, spark, "sales.orders")
    assert dict(df.dtypes)["qty"] == "bigint" and "buyer" in df.columns
    assert df.where("order_id = 3").select("buyer", "qty").collect()[0].asDict() == {
        "buyer": "c3",
        "qty": 3,
    }
    lhs.write(lh, orders(spark, 20, 22).withColumnRenamed("customer", "buyer"), "sales.orders")
    assert df.count() == 20 and lhs.read(lh, spark, "sales.orders").count() == 22


# -- delete ----------------------------------------------------------------------------------------
def test_delete_by_condition(spark, lh):
    lhs.write(lh, orders(spark, 0, 300), "sales.orders")
    n = lhs.delete(lh, spark, "sales.orders", "qty = 0 AND order_id >= 100")
    assert n == 40
    assert lhs.delete(lh, spark, "sales.orders", F.col("order_id") < 10) == 10
    assert lhs.delete(lh, spark, "sales.orders", "order_id < 10") == 0
    want = [i for i in range(10, 300) if not (i % 5 == 0 and i >= 100)]
    assert ids(lhs.read(lh, spark, "sales.orders")) == want
    assert sorted(lh.read("sales.orders").column("order_id").to_pylist()) == want
    assert lh.table_stats("sales.orders").deleted_rows == 50


def test_delete_bad_condition(spark, lh):
    lhs.write(lh, orders(spark, 0, 10), "sales.orders")
    v = lh.version
    for bad in ["nope = 1", "order_id = = 1", ""]:
        with pytest.raises(ValueError):
            lhs.delete(lh, spark, "sales.orders", bad)
    with pytest.raises(TypeError):
        lhs.delete(lh, spark, "sales.orders", 42)
    with pytest.raises(NotFound):
        lhs.delete(lh, spark, "sales.nope", "order_id = 1")
    assert lh.version == v


def test_concurrent_deletes_of_disjoint_rows_both_commit(spark, lh):
    lhs.write(lh, orders(spark, 0, 100), "sales.orders")
    a, b = lh.begin(), lh.begin()
    lhs.delete(lh, spark, "sales.orders", "order_id < 10", txn=a)
    lhs.delete(lh, spark, "sales.orders", "order_id >= 90", txn=b)
    a.commit()
    b.commit()
    assert ids(lhs.read(lh, spark, "sales.orders")) == list(range(10, 90))


def test_delete_and_merge_of_the_same_rows_conflict(spark, lh):
    lhs.write(lh, orders(spark, 0, 100), "sales.orders")
    a, b = lh.begin(), lh.begin()
    lhs.delete(lh, spark, "sales.orders", "order_id < 10", txn=a)
    lhs.merge(lh, orders(spark, 3, 6, customer="u"), "sales.orders", on="order_id", txn=b)
    a.commit()
    with pytest.raises(lakehouse.RetryableConflict):
        b.commit()
    assert ids(lhs.read(lh, spark, "sales.orders")) == list(range(10, 100))


# -- merge -----------------------------------------------------------------------------------------
def test_merge_upsert(spark, lh):
    lhs.write(lh, orders(spark, 0, 100), "sales.orders")
    changes = orders(spark, 95, 110, customer="new")
    r = lhs.merge(lh, changes, "sales.orders", on=["order_id"])
    assert (r.inserted, r.updated, r.deleted) == (10, 5, 0)
    df = lhs.read(lh, spark, "sales.orders")
    assert ids(df) == list(range(110))
    assert ids(df.where("customer LIKE 'new%'")) == list(range(95, 110))
    # the same result through the Python API
    assert lh.read("sales.orders", where="customer LIKE 'new%'").num_rows == 15


def test_merge_delete_and_ignore(spark, lh):
    lhs.write(lh, orders(spark, 0, 20), "sales.orders")
    src = orders(spark, 15, 25, customer="z")
    r = lhs.merge(
        lh, src, "sales.orders", "order_id", when_matched="delete", when_not_matched="ignore"
    )
    assert (r.inserted, r.updated, r.deleted) == (0, 0, 5)
    assert ids(lhs.read(lh, spark, "sales.orders")) == list(range(15))
    r = lhs.merge(lh, src, "sales.orders", "order_id", when_matched="ignore")
    assert (r.inserted, r.updated, r.deleted) == (10, 0, 0)
    assert ids(lhs.read(lh, spark, "sales.orders")) == [*range(15), *range(15, 25)]


def test_merge_bad_input(spark, lh):
    lhs.write(lh, orders(spark, 0, 20), "sales.orders")
    v = lh.version
    dup = orders(spark, 0, 3).union(orders(spark, 2, 3))
    with pytest.raises(ValueError, match="duplicate keys"):
        lhs.merge(lh, dup, "sales.orders", on="order_id")
    with pytest.raises(ValueError, match="merge key 'nope'"):
        lhs.merge(lh, orders(spark, 0, 3), "sales.orders", on="nope")
    with pytest.raises(ValueError, match="when_matched"):
        lhs.merge(lh, orders(spark, 0, 3), "sales.orders", on="order_id", when_matched="x")
    with pytest.raises(ValueError, match="'extra'"):
        lhs.merge(
            lh, orders(spark, 0, 3).withColumn("extra", F.lit(1)), "sales.orders", on="order_id"
        )
    # a source key matching two target rows
    lhs.write(lh, orders(spark, 0, 1), "sales.orders")
    with pytest.raises(ValueError, match="unique target keys"):
        lhs.merge(lh, orders(spark, 0, 1), "sales.orders", on="order_id")
    assert lh.version == v + 1
    assert [f for f in data_files_on_disk(lh) if "_spark" in f or "-spark-" in f] == []


def test_concurrent_merges_inserting_the_same_key_conflict(spark, lh):
    a = lh.begin(Isolation.SNAPSHOT)
    b = lh.begin(Isolation.SNAPSHOT)
    lhs.merge(lh, orders(spark, 0, 5), "sales.orders", on="order_id", txn=a)
    lhs.merge(lh, orders(spark, 4, 8), "sales.orders", on="order_id", txn=b)
    a.commit()
    with pytest.raises(lakehouse.CommitConflict):
        b.commit()
    assert ids(lhs.read(lh, spark, "sales.orders")) == list(range(5))


# -- Spark SQL ----------------------------------------------------------------------
def test_register_views_and_time_travel_in_sql(spark, lh):
    lhs.write(lh, orders(spark, 0, 10), "sales.orders")
    v = lh.version
    lhs.delete(lh, spark, "sales.orders", "order_id >= 5")
    with lh.begin() as txn:
        txn.create_view("sales.big", "SELECT order_id FROM sales.orders WHERE order_id > 2")
    names = lhs.register_views(lh, spark)
    assert names == ["sales.orders", "sales.big"]
    assert lhs.register_views(lh, spark, version=v) == [f"sales.orders@v{v}"]
    count = "SELECT count(*) AS n FROM `{}`"
    assert spark.sql(count.format("sales.orders")).first().n == 5
    assert spark.sql(count.format(f"sales.orders@v{v}")).first().n == 10
    assert spark.sql(count.format("sales.big")).first().n == 2
    diff = spark.sql(
        f"SELECT order_id FROM `sales.orders@v{v}` EXCEPT SELECT order_id FROM `sales.orders`"
    )
    assert ids(diff) == [5, 6, 7, 8, 9]


def test_memory_lakehouse_is_refused(spark):
    h = lakehouse.open("memory://spark-refused")
    try:
        with h.begin() as txn:
            txn.create_namespace("n")
            txn.create_table("n.t", pa.schema([("a", pa.int64())]))
        with pytest.raises(ValueError, match="memory://"):
            lhs.read(h, spark, "n.t")
    finally:
        h.close()


# -- string literals: Spark's escapes reach the lakehouse's parser as Spark reads them ----------
#: each in a file of its own (bounds [v, v]), then plain customers c0..c6 in a third
ODD = ["a\\", "o'b"]


def odd_orders(spark, lh):
    for i, name in enumerate(ODD):
        frame = orders(spark, i * 5, i * 5 + 5).withColumn("customer", F.lit(name))
        lhs.write(lh, frame, "sales.orders")
    lhs.write(lh, orders(spark, 10, 20), "sales.orders")


def py_ids(lh, value):
    import pyarrow.compute as pc

    rows = lh.read("sales.orders", where=pc.field("customer") == value)
    return sorted(rows.column("order_id").to_pylist())


# Spark text (as Spark SQL reads it) -> the value it means
ODD_WHERES = [
    ("customer = 'a\\\\'", "a\\"),
    ("customer = 'o\\'b'", "o'b"),
    ('customer = "a\\\\"', "a\\"),  # Spark: a string, not a column
    ("order_id >= 0 AND customer = 'o''b'", "o'b"),  # Spark 4: a doubled quote, one literal
    ("customer = 'a\\u005C' AND order_id < 100", "a\\"),  # not carried over: no pruning
]


def test_string_literals_with_backslashes_and_quotes_read_delete_update(spark, lh):
    from lakehouse.spark.ops import _prunable

    odd_orders(spark, lh)
    for where, value in ODD_WHERES:
        want = py_ids(lh, value)
        assert ids(lhs.read(lh, spark, "sales.orders", where=where)) == want, where
    # the value is carried over, not dropped: pruning keeps only the file holding it
    # (as the lakehouse's own spelling of the same condition does)
    everything = {f.path for f in lh.scan_plan("sales.orders")}
    for where, own in [
        ("customer = 'a\\\\' AND order_id >= 0", "customer = 'a\\'"),
        ("customer = 'o''b'", "customer = 'o''b'"),
    ]:
        kept = {f.path for f in lh.scan_plan("sales.orders", where=_prunable(spark, where, ORDERS))}
        assert kept == {f.path for f in lh.scan_plan("sales.orders", where=own)}, where
        assert 0 < len(kept) < len(everything), where
    assert _prunable(spark, "customer = 'a\\u005C'", ORDERS) is None  # not exact: unused
    # update and delete find exactly the rows Spark's condition means
    assert lhs.update(lh, spark, "sales.orders", "customer = 'o\\'b'", {"qty": 99}) == 5
    updated = lh.read("sales.orders", where="qty = 99").column("order_id").to_pylist()
    assert sorted(updated) == py_ids(lh, "o'b") == [5, 6, 7, 8, 9]
    assert lhs.delete(lh, spark, "sales.orders", "customer = 'a\\\\'") == 5
    assert py_ids(lh, "a\\") == []
    assert ids(lhs.read(lh, spark, "sales.orders")) == list(range(5, 20))


def test_overwrite_where_with_backslash_and_quote_replaces_spark_rows(spark, lh):
    odd_orders(spark, lh)
    new = orders(spark, 100, 103).withColumn("customer", F.lit("a\\"))
    lhs.write(lh, new, "sales.orders", mode="overwrite", where="customer = 'a\\\\'")
    assert py_ids(lh, "a\\") == [100, 101, 102]
    assert py_ids(lh, "o'b") == [5, 6, 7, 8, 9]
    new = orders(spark, 200, 201).withColumn("customer", F.lit("o'b"))
    lhs.write(lh, new, "sales.orders", mode="overwrite", where='customer = "o\'b"')
    assert py_ids(lh, "o'b") == [200]
    new = orders(spark, 300, 301).withColumn("customer", F.lit("o'b"))
    lhs.write(lh, new, "sales.orders", mode="overwrite", where="customer = 'o''b'")
    assert py_ids(lh, "o'b") == [300]
    assert ids(lhs.read(lh, spark, "sales.orders")) == [*range(10, 20), 100, 101, 102, 300]
    # a literal whose value the lakehouse cannot be sure to read as Spark does: refused
    v = lh.version
    for where in ("customer = 'a\\u005C'", "customer = 'o' 'b'", "customer = X'41'"):
        with pytest.raises(ValueError, match="bad where"):
            lhs.write(lh, new, "sales.orders", mode="overwrite", where=where)
    assert lh.version == v
