"""``lakehouse.spark.update``: the Python ``txn.update`` with Spark SQL.

Every update is checked against the Python ``txn.update`` of the same
change on a copy of the table (same rows, same files): the tables must read
the same after, and the change feed must report one pre- and one post-image
per updated row. Both paths are covered: few rows (collected, written by
the driver, inlined) and many (written by executors, positions returned as
bitmaps), on plain, partitioned and primary-key tables, with a renamed
column, through the Python-task reader, and on S3.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
from pyspark.sql import functions as F

import lakehouse.spark as lhs

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

T = "s.orders"
SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("customer", pa.string()),
        ("qty", pa.int32()),
        ("small", pa.int16()),
        ("price", pa.float64()),
    ]
)
#: every write makes Parquet files, updates too: the executors' path
FILES = {"inline.max_rows": "0"}
NO_AUTO = {"compaction.auto": "false"}


def data(start: int, stop: int) -> pa.Table:
    ids = list(range(start, stop))
    return pa.table(
        {
            "order_id": ids,
            "customer": [f"c{i % 7}" for i in ids],
            "qty": pa.array([i % 5 for i in ids], pa.int32()),
            "small": pa.array([i % 100 for i in ids], pa.int16()),
            "price": [i * 0.5 for i in ids],
        },
        schema=SCHEMA,
    )


def make(path: Any, props: dict[str, str] | None = None, **create: Any) -> lakehouse.Lakehouse:
    """A lakehouse with ``T`` holding orders 0..599 in three appends (three files)."""
    lh = lakehouse.open(str(path), kv_options={"fsync": False})
    with lh.begin() as txn:
        txn.create_namespace("s")
        # no automatic compaction: each test knows its versions
        txn.create_table(T, SCHEMA, {**(props or {}), **NO_AUTO}, **create)
    for lo in (0, 200, 400):
        lh.append(T, data(lo, lo + 200))
    return lh


def rows(lh: lakehouse.Lakehouse, table: str = T) -> list[tuple[Any, ...]]:
    t = lh.read(table)
    return sorted(tuple(r.values()) for r in t.to_pylist())


def images(lh: lakehouse.Lakehouse, version: int) -> Counter[str]:
    return Counter(lh.changes(T, version, version).column("_change_type").to_pylist())


def same_as_python(
    spark: Any,
    tmp_path: Any,
    props: dict[str, str] | None,
    condition: str,
    values: dict[str, Any],
    py_condition: str | None = None,
    py_values: dict[str, Any] | None = None,
    **create: Any,
) -> tuple[lakehouse.Lakehouse, int]:
    """Run the Spark update on one copy, the Python one on another; they agree."""
    lh = make(tmp_path / "spark", props, **create)
    ref = make(tmp_path / "python", props, **create)
    with ref:
        with ref.begin() as txn:
            want = txn.update(T, py_condition or condition, py_values or values)
        before = lh.version
        n = lhs.update(lh, spark, T, condition, values)
        assert n == want > 0
        assert lh.version == before + 1
        assert rows(lh) == rows(ref)
    assert images(lh, lh.version) == Counter({"update_preimage": n, "update_postimage": n})
    return lh, n


@pytest.mark.parametrize("props", [FILES, None], ids=["executors", "driver-inlined"])
def test_update_matches_python_update(spark, tmp_path, props):
    lh, n = same_as_python(
        spark, tmp_path, props, "order_id % 3 = 0", {"qty": "qty * 2 + 1", "customer": "'x'"}
    )
    with lh:
        assert n == 200
        with lh.at_version(lh.version - 1) as old:
            before = {f.path for f in old.list_data_files(T)}
        new = [f.path for f in lh.list_data_files(T) if f.path not in before]
        assert new and all(p.endswith(".inline") == (props is None) for p in new)
        # the updated rows read back through Spark too
        got = lhs.read(lh, spark, T, where="customer = 'x'")
        assert sorted(r.order_id for r in got.collect()) == list(range(0, 600, 3))


@pytest.mark.parametrize("props", [FILES, None], ids=["executors", "driver-inlined"])
def test_the_table_is_scanned_once(spark, tmp_path, props):
    """The condition runs once per row of the table: later jobs read the cache."""
    seen = spark.sparkContext.accumulator(0)

    def counted(order_id):
        seen.add(1)
        return order_id % 2 == 0

    cond = F.udf(counted, "boolean")(F.col("order_id"))
    with make(tmp_path / "lh", props) as lh:
        assert lhs.update(lh, spark, T, cond, {"qty": "qty + 1"}) == 300
        assert seen.value == 600


@pytest.mark.parametrize("props", [FILES, None], ids=["executors", "driver-inlined"])
def test_partitioned_table_moves_rows_between_partitions(spark, tmp_path, props):
    lh, n = same_as_python(
        spark,
        tmp_path,
        props,
        "qty = 1",
        {"customer": "'moved'", "price": "price + 1"},
        partition_by=["customer"],
    )
    with lh:
        assert n == 120
        parts = {tuple(f.partition.values()) for f in lh.list_data_files(T) if f.record_count}
        assert ("moved",) in parts


@pytest.mark.parametrize("props", [FILES, None], ids=["executors", "driver-inlined"])
def test_primary_key_changes_checked(spark, tmp_path, props):
    lh, _ = same_as_python(
        spark,
        tmp_path,
        props,
        "order_id < 50",
        {"order_id": "order_id + 10000"},
        primary_key=["order_id"],
    )
    with lh:
        before, v = rows(lh), lh.version
        with pytest.raises(lakehouse.DuplicateKey):
            lhs.update(lh, spark, T, "order_id BETWEEN 100 AND 110", {"order_id": "order_id + 1"})
        assert rows(lh) == before and lh.version == v
        # swapping keys is fine: the old rows are gone before the new keys are checked
        lhs.update(
            lh, spark, T, "order_id IN (100, 101)", {"order_id": "201 - order_id", "qty": "7"}
        )
        got = {r[0]: r[2] for r in rows(lh)}
        assert got[100] == got[101] == 7 and len(got) == len(before)
        assert files_on_disk_match(lh)


def files_on_disk_match(lh: lakehouse.Lakehouse) -> bool:
    """No file the failed update wrote is left in the table's directory."""
    import os

    base = lh.data_location()[0][len("file://") :]
    with lh.begin() as txn:
        d = os.path.join(base, txn.data_dir(T))
    on_disk = set(os.listdir(d)) if os.path.isdir(d) else set()
    registered = {
        f.path.rsplit("/", 1)[-1] for f in lh.list_data_files(T) if not f.path.endswith(".inline")
    }
    return on_disk == registered


def test_renamed_column_and_python_reader(spark, tmp_path):
    """A rename after the data was written, and a ``timestamp[ns]`` column, which
    Spark's Parquet reader cannot read: the Python-task reader finds the rows."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("at", pa.timestamp("ns"))])
    schema = schema.append(pa.field("n", pa.int64()))
    lh = lakehouse.open(str(tmp_path / "lh"), kv_options={"fsync": False})
    with lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, schema, {**FILES, **NO_AUTO})
        t = pa.table(
            {
                "id": list(range(300)),
                # whole microseconds: Spark's timestamps hold no finer (docs/spark.md)
                "at": pa.array([i * 1_000_001_000 for i in range(300)], pa.timestamp("ns")),
                "n": list(range(300)),
            },
            schema=schema,
        )
        lh.append(T, t)
        with lh.begin() as txn:
            txn.alter_table(T, rename_columns={"n": "amount"})
        v = lh.version
        assert lhs.update(lh, spark, T, "id >= 250", {"amount": F.col("amount") * 10}) == 50
        got = {r["id"]: (r["at"], r["amount"]) for r in lh.read(T).to_pylist()}
        assert got[251][1] == 2510 and got[249][1] == 249 and len(got) == 300
        assert got[251][0] == t.column("at")[251].as_py()
        assert images(lh, v + 1) == Counter({"update_preimage": 50, "update_postimage": 50})


def test_joins_a_transaction_and_rolls_back_with_it(spark, tmp_path):
    with make(tmp_path / "lh", FILES) as lh:
        v = lh.version
        with lh.begin() as txn:
            assert lhs.update(lh, spark, T, "order_id < 10", {"qty": 99}, txn=txn) == 10
            txn.append(T, data(1000, 1001))
            # the transaction sees its own update
            assert txn.read(T, where="qty = 99").num_rows == 10
        assert lh.version == v + 1
        assert lh.read(T, where="qty = 99").num_rows == 10
        before = rows(lh)
        txn = lh.begin()
        lhs.update(lh, spark, T, "order_id >= 10", {"qty": 0}, txn=txn)
        txn.rollback()
        assert rows(lh) == before and lh.version == v + 1
        assert files_on_disk_match(lh)


def test_concurrent_delete_of_an_updated_row_retries(spark, tmp_path):
    """The executors' path (the driver's is txn.replace_rows, tested on its own)."""
    with make(tmp_path / "lh", FILES) as lh:
        txn = lh.begin()
        assert lhs.update(lh, spark, T, "order_id < 20", {"qty": 50}, txn=txn) == 20
        lh.delete(T, "order_id = 7")  # commits first
        with pytest.raises(lakehouse.RetryableConflict):
            txn.commit()
        assert lh.read(T, where="qty = 50").num_rows == 0
        # a delete of another row does not stop it
        txn = lh.begin()
        lhs.update(lh, spark, T, "order_id < 20", {"qty": 50}, txn=txn)
        lh.delete(T, "order_id = 500")
        txn.commit()
        assert lh.read(T, where="qty = 50").num_rows == 19


@pytest.mark.parametrize("props", [FILES, None], ids=["executors", "driver-inlined"])
def test_rows_the_transaction_wrote_keep_their_kind(spark, tmp_path, props):
    """In one transaction: rows it inserted stay inserts when updated again, rows
    it updated before stay updates (one pre- and one post-image), as in Python."""
    feeds = []
    for name in ("spark", "python"):
        with make(tmp_path / name, props) as h:
            with h.begin() as txn:
                txn.append(T, data(1000, 1010))
                txn.update(T, "order_id < 10", {"qty": 1})
                cond, values = "order_id < 20 OR order_id >= 1005", {"price": "price * 2"}
                if name == "spark":
                    assert lhs.update(h, spark, T, cond, values, txn=txn) == 25
                else:
                    assert txn.update(T, cond, values) == 25
            feed = h.changes(T, h.version, h.version)
            feeds.append((rows(h), Counter(feed.column("_change_type").to_pylist())))
    assert feeds[0] == feeds[1]
    assert feeds[0][1] == Counter({"insert": 10, "update_preimage": 20, "update_postimage": 20})


def test_no_matching_row_writes_nothing(spark, tmp_path):
    with make(tmp_path / "lh", FILES) as lh:
        v, files = lh.version, lh.list_data_files(T)
        assert lhs.update(lh, spark, T, "order_id < 0", {"qty": "qty + 1"}) == 0
        assert lh.version == v and lh.list_data_files(T) == files


@pytest.mark.parametrize(
    ("condition", "values", "error", "message"),
    [
        ("order_id < 5", {"nope": "1"}, ValueError, "no column 'nope'"),
        ("nope < 5", {"qty": "1"}, ValueError, "no column 'nope'"),
        ("order_id < 5", {"qty": "nope + 1"}, ValueError, "no column 'nope'"),
        ("order_id < 5", {"qty": "qty +* 1"}, ValueError, "value for column 'qty'"),
        ("order_id < 5", {"qty": "order_id"}, ValueError, "cannot be cast safely"),
        ("order_id < 5", {"small": "small + 1"}, ValueError, "CAST"),
        ("order_id < 5", {"small": "70000"}, ValueError, "does not fit"),
        ("order_id < 5", {"order_id": None}, ValueError, "not nullable"),
        ("order_id < 5", {}, TypeError, "non-empty"),
        ("order_id < 5", {1: "2"}, TypeError, "column names"),
        ("order_id <", {"qty": "1"}, ValueError, "condition"),
    ],
)
def test_bad_input_raises_before_any_job(spark, tmp_path, condition, values, error, message):
    with make(tmp_path / "lh", FILES) as lh:
        v = lh.version
        group = f"lh-update-bad-{abs(hash((condition, str(values))))}"
        spark.sparkContext.setJobGroup(group, "bad input")
        try:
            with pytest.raises(error, match=message):
                lhs.update(lh, spark, T, condition, values)
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        assert spark.sparkContext.statusTracker().getJobIdsForGroup(group) == []
        assert lh.version == v


def test_literals_are_checked_as_values(spark, tmp_path):
    """A literal fits a narrower column when its value does (as in Python's update)."""
    same_as_python(spark, tmp_path, FILES, "order_id < 20", {"small": "-5", "price": "1.5"})


def test_null_into_a_non_nullable_column_fails_in_the_job(spark, tmp_path):
    with make(tmp_path / "lh", FILES) as lh:
        v = lh.version
        with pytest.raises(ValueError, match="not nullable"):
            lhs.update(
                lh, spark, T, "order_id < 5", {"order_id": "CASE WHEN qty > 2 THEN NULL END"}
            )
        assert lh.version == v and files_on_disk_match(lh)


@pytest.mark.s3
def test_update_on_s3(spark, s3_bucket, s3_options):
    from parquet_files import PARQUET

    lh = lakehouse.open(f"s3://{s3_bucket}/lh", storage_options=s3_options)
    with lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, SCHEMA, {**PARQUET, **NO_AUTO})
        lh.append(T, data(0, 300))
        v = lh.version
        n = lhs.update(lh, spark, T, "order_id % 4 = 1", {"customer": "concat(customer, '!')"})
        assert n == 75
        got = {r["order_id"]: r["customer"] for r in lh.read(T).to_pylist()}
        assert got[5] == "c5!" and got[4] == "c4" and len(got) == 300
        assert images(lh, v + 1) == Counter({"update_preimage": 75, "update_postimage": 75})
        # the few-rows path on S3: collected and inlined
        with lh.begin() as txn:
            txn.alter_table(T, set_properties={"inline.max_rows": "100"})
        assert lhs.update(lh, spark, T, "order_id < 3", {"qty": 42}) == 3
        assert lh.read(T, where="qty = 42").num_rows == 3
        assert lh.table_stats(T).inlined_rows == 3
