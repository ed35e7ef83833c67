"""lakehouse.spark and inlined rows: reads union them in, deletes and merges reach
them, small writes are inlined.

A table holds rows in Parquet files and in inline files (rows in the
kvstore, no object in storage): ``inline.max_rows`` is set low so a few
hundred rows make both. Every result is checked against the lakehouse's own
Python read of the same version. One SparkSession for the run
(tests/spark_fixtures.py).
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
from pyspark.sql import functions as F

import lakehouse.spark as lhs

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

T = "sales.orders"
MAX = 50  # inline.max_rows of the test tables
ORDERS = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("customer", pa.string()),
        ("qty", pa.int32()),
        ("total", pa.decimal128(12, 2)),
        ("placed_at", pa.timestamp("us", tz="UTC")),
    ]
)
PROPS = {"inline.max_rows": str(MAX), "compaction.auto": "false"}


def rows(ids, customer: str = "c") -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "order_id": pa.array(ids, pa.int64()),
            "customer": [f"{customer}{i % 7}" for i in ids],
            "qty": pa.array([i % 5 for i in ids], pa.int32()),
            "total": pa.array([None] * len(ids), pa.decimal128(12, 2)),
            "placed_at": pa.array([1_700_000_000_000_000 + i for i in ids], ORDERS[4].type),
        },
        schema=ORDERS,
    )


@pytest.fixture
def lh(tmp_path):
    """File rows 0..199 (two files), inlined rows 200..229 and 300..309, with 205
    and 100 deleted (a deletion vector on an inline file and on a Parquet one)."""
    h = lakehouse.open(str(tmp_path / "lh"), kv_options={"fsync": False})
    with h.begin() as txn:
        txn.create_namespace("sales")
        txn.create_table(T, ORDERS, PROPS)
    h.append(T, rows(range(0, 100)))
    h.append(T, rows(range(100, 200)))
    h.append(T, rows(range(200, 230)))
    h.append(T, rows(range(300, 310)))
    h.delete(T, "order_id = 205 OR order_id = 100")
    yield h
    h.close()


def inline_files(h, table=T):
    return [f for f in h.list_data_files(table) if f.is_inline]


def stored_files(h, table=T):
    return [f for f in h.list_data_files(table) if not f.is_inline]


def on_disk(h, table=T):
    base = h.data_location()[0][len("file://") :]
    with h.begin() as txn:
        d = os.path.join(base, txn.data_dir(table))
    return sorted(os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs)


def ids_of(frame) -> list[int]:
    return sorted(r[0] for r in frame.select("order_id").collect())


def py_ids(view, table=T, **kw) -> list[int]:
    return sorted(view.read(table, **kw).column("order_id").to_pylist())


def test_fixture_holds_file_and_inline_rows(lh):
    assert len(inline_files(lh)) == 2 and len(stored_files(lh)) == 2
    assert lh.table_stats(T).inlined_rows == 39


def test_read_unions_inlined_rows_with_the_file_scan(spark, lh):
    frame = lhs.read(lh, spark, T)
    assert ids_of(frame) == py_ids(lh)
    assert 205 not in ids_of(frame) and 209 in ids_of(frame)
    assert frame.count() == lh.table_stats(T).rows == 238
    # every column, with its type, equals the Python read (decimals, UTC timestamps)
    got = frame.orderBy("order_id").toArrow()
    want = lh.read(T).sort_by("order_id")
    for name in ORDERS.names:
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name


def test_filters_counts_and_pruning(spark, lh):
    assert lhs.read(lh, spark, T, where="order_id >= 300").count() == 10
    got = lhs.read(lh, spark, T).where(F.col("qty") == 3)
    assert ids_of(got) == py_ids(lh, where="qty = 3")
    # the plan prunes inline files by their bounds like Parquet ones
    plan = lh.scan_plan(T, where="order_id >= 300")
    assert [f.inline is not None for f in plan] == [True]
    assert plan[0].rows == 10
    frame = lhs.read(lh, spark, T, where="order_id >= 210 AND order_id < 220")
    assert ids_of(frame) == list(range(210, 220))


def test_time_travel_and_views_see_inlined_rows(spark, lh):
    v = lh.version
    lh.append(T, rows(range(400, 405)))
    assert ids_of(lhs.read(lh, spark, T, version=v)) == py_ids(lh.at_version(v))
    lhs.register_views(lh, spark)
    assert spark.sql(f"SELECT count(*) FROM `{T}`").collect()[0][0] == 243


def test_python_reader_path_unions_inlined_rows(spark, tmp_path):
    """A type Spark's Parquet reader cannot read (timestamp[ns]): the Python tasks
    read the files; the driver's inline rows join them all the same."""
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("ns"))])
    h = lakehouse.open(str(tmp_path / "ns"), kv_options={"fsync": False})
    try:
        with h.begin() as txn:
            txn.create_namespace("n")
            txn.create_table("n.t", schema, PROPS)
        h.append("n.t", pa.table({"id": range(100), "at": [i * 1000 for i in range(100)]}, schema))
        h.append("n.t", pa.table({"id": [500, 501], "at": [5_000, 6_000]}, schema))
        assert len(inline_files(h, "n.t")) == 1
        assert ids_of_col(lhs.read(h, spark, "n.t"), "id") == [*range(100), 500, 501]
        deleted = lhs.delete(h, spark, "n.t", "id = 501 OR id = 3")
        assert deleted == 2
        assert ids_of_col(lhs.read(h, spark, "n.t"), "id") == sorted(
            h.read("n.t").column("id").to_pylist()
        )
        assert 501 not in h.read("n.t").column("id").to_pylist()
    finally:
        h.close()


def ids_of_col(frame, name) -> list[int]:
    return sorted(r[0] for r in frame.select(name).collect())


def test_delete_reaches_inlined_and_file_rows(spark, lh):
    before = {f.path: f for f in lh.list_data_files(T)}
    n = lhs.delete(lh, spark, T, "order_id % 10 = 7")
    expected = [i for i in py_ids(lh.at_version(lh.version - 1)) if i % 10 != 7]
    assert n == 238 - len(expected)
    assert py_ids(lh) == expected == ids_of(lhs.read(lh, spark, T))
    # deletion marks, no rewrite: the same files, inline ones included
    assert {f.path for f in lh.list_data_files(T)} == set(before)
    assert lh.table_stats(T).inlined_rows == 39 - 4  # 207, 217, 227, 307


def test_delete_only_inlined_rows(spark, lh):
    assert lhs.delete(lh, spark, T, "order_id >= 300") == 10
    assert py_ids(lh) == [i for i in range(230) if i not in (100, 205)]
    assert lh.table_stats(T).inlined_rows == 29


def test_merge_updates_inlined_and_file_rows_and_inserts(spark, lh):
    # 150 (file), 209 and 305 (inline) updated; 205 (deleted) and 900 inserted
    src = lh.read(T).filter(pa.compute.is_in(lh.read(T)["order_id"], pa.array([150, 209, 305])))
    src = src.set_column(1, "customer", pa.array(["upd"] * 3))
    src = pa.concat_tables([src, rows([205, 900], customer="new")])
    r = lhs.merge(lh, spark.createDataFrame(src), T, on="order_id")
    assert (r.updated, r.inserted, r.deleted) == (3, 2, 0)
    got = {row["order_id"]: row["customer"] for row in lh.read(T).to_pylist()}
    assert [got[i] for i in (150, 209, 305)] == ["upd"] * 3
    assert got[205].startswith("new") and got[900].startswith("new")
    assert len(got) == 240
    assert ids_of(lhs.read(lh, spark, T)) == sorted(got)
    # the change feed reports exactly these updates and inserts
    ch = lh.changes(T, lh.version, lh.version)
    kinds = sorted(zip(ch.column("_change_type").to_pylist(), ch.column("order_id").to_pylist()))
    assert ("update_postimage", 209) in kinds and ("update_postimage", 305) in kinds
    assert ("insert", 900) in kinds


def test_merge_deletes_inlined_rows(spark, lh):
    src = spark.createDataFrame(rows([201, 301, 10]))
    r = lhs.merge(lh, src, T, on="order_id", when_matched="delete", when_not_matched="ignore")
    assert (r.updated, r.inserted, r.deleted) == (0, 0, 3)
    assert not {201, 301, 10} & set(py_ids(lh))
    assert lh.table_stats(T).rows == 235


def test_small_write_of_local_rows_is_inlined_without_files(spark, lh):
    disk = on_disk(lh)
    v = lhs.write(lh, spark.createDataFrame(rows(range(1000, 1020))), T)
    assert v == lh.version
    new = [f for f in inline_files(lh) if f.stats["order_id"].min == 1000]
    assert len(new) == 1 and new[0].record_count == 20
    assert on_disk(lh) == disk  # no Parquet file written, or left behind
    assert ids_of(lhs.read(lh, spark, T)) == py_ids(lh)
    assert set(range(1000, 1020)) <= set(py_ids(lh))


def test_small_write_without_a_row_bound_is_inlined_from_its_files(spark, lh):
    """A DataFrame whose plan does not bound its rows (a Python UDF over a shuffle):
    the job writes files, the driver finds them small, inlines their rows and
    deletes them."""
    disk = on_disk(lh)
    plus = F.udf(lambda x: x + 2000, "long")
    df = (
        spark.createDataFrame(rows(range(0, 30)))
        .repartition(3)
        .withColumn("order_id", plus(F.col("order_id")))
    )
    assert df._jdf.queryExecution().optimizedPlan().maxRows().isDefined() is False
    lhs.write(lh, df, T)
    assert on_disk(lh) == disk
    assert sorted(f.stats["order_id"].min for f in inline_files(lh)) == [200, 300, 2000]
    assert set(range(2000, 2030)) <= set(py_ids(lh))


def test_a_write_above_max_rows_makes_files(spark, lh):
    inl = len(inline_files(lh))
    big = spark.range(5000, 5000 + MAX + 1).select(
        F.col("id").alias("order_id"),
        F.lit("big").alias("customer"),
        F.lit(1).cast("int").alias("qty"),
        F.lit(None).cast("decimal(12,2)").alias("total"),
        F.timestamp_seconds(F.col("id")).alias("placed_at"),
    )
    lhs.write(lh, big, T)
    assert len(inline_files(lh)) == inl
    assert len(stored_files(lh)) > 2
    assert lh.table_stats(T).rows == 238 + MAX + 1


def test_small_overwrite_and_replace_partitions_are_inlined(spark, tmp_path):
    h = lakehouse.open(str(tmp_path / "p"), kv_options={"fsync": False})
    try:
        with h.begin() as txn:
            txn.create_namespace("sales")
            txn.create_table(T, ORDERS, PROPS, partition_by=["customer"])
        h.append(T, rows(range(0, 200)))  # files, one per customer
        # replace the partitions c1 and c2 with 4 rows: inlined, one inline file each
        src = rows([1, 8, 2, 9]).set_column(1, "customer", pa.array(["c1", "c1", "c2", "c2"]))
        lhs.write(h, spark.createDataFrame(src), T, mode="replace_partitions")
        got = h.read(T)
        by = sorted(zip(got["customer"].to_pylist(), got["order_id"].to_pylist()))
        assert [i for c, i in by if c in ("c1", "c2")] == [1, 8, 2, 9]
        assert sorted(f.partition["customer"] for f in inline_files(h)) == ["c1", "c2"]
        assert ids_of(lhs.read(h, spark, T)) == py_ids(h)
        # overwrite with where: the rows of c3 become the 3 given (inlined)
        src = rows([3, 10, 17])
        src = src.set_column(1, "customer", pa.array(["c3"] * 3))
        lhs.write(h, spark.createDataFrame(src), T, mode="overwrite", where="customer = 'c3'")
        assert py_ids(h, where="customer = 'c3'") == [3, 10, 17]
        # overwrite all with 5 rows: only inlined rows remain
        lhs.write(h, spark.createDataFrame(rows(range(5))), T, mode="overwrite")
        assert py_ids(h) == list(range(5))
        assert h.table_stats(T).inlined_rows == h.table_stats(T).rows == 5
        assert ids_of(lhs.read(h, spark, T)) == list(range(5))
    finally:
        h.close()


def test_compaction_moves_inlined_rows_spark_reads_the_same(spark, lh):
    before = ids_of(lhs.read(lh, spark, T))
    with lh.begin() as txn:
        txn.compact(T)
    assert not inline_files(lh)
    assert ids_of(lhs.read(lh, spark, T)) == before == py_ids(lh)


def test_inlined_rows_read_through_a_column_rename(spark, lh):
    with lh.begin() as txn:
        txn.alter_table(T, rename_columns={"customer": "buyer"})
    frame = lhs.read(lh, spark, T, where="order_id >= 300")
    got = {r["order_id"]: r["buyer"] for r in frame.collect()}
    assert got == {i: f"c{i % 7}" for i in range(300, 310)}
    assert ids_of(lhs.read(lh, spark, T)) == py_ids(lh)


def test_small_write_through_python_tasks_is_inlined_from_their_files(spark, tmp_path):
    """A type Spark's writer does not produce (timestamp[ns]): Python tasks write the
    files; the driver reads them back, inlines the rows and deletes them."""
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("ns"))])
    h = lakehouse.open(str(tmp_path / "pw"), kv_options={"fsync": False})
    try:
        with h.begin() as txn:
            txn.create_namespace("n")
            txn.create_table("n.t", schema, PROPS)
        plus = F.udf(lambda x: x + 1, "long")
        df = (
            spark.range(0, 12, numPartitions=3)
            .repartition(2)
            .select(
                plus(F.col("id")).alias("id"),
                F.timestamp_seconds(F.col("id")).cast("timestamp_ntz").alias("at"),
            )
        )
        assert df._jdf.queryExecution().optimizedPlan().maxRows().isDefined() is False
        lhs.write(h, df, "n.t")
        (f,) = h.list_data_files("n.t")
        assert f.is_inline and f.record_count == 12
        assert on_disk(h, "n.t") == []
        got = h.read("n.t").sort_by("id")
        assert got.column("id").to_pylist() == list(range(1, 13))
        assert got.schema.field("at").type == pa.timestamp("ns")
    finally:
        h.close()
