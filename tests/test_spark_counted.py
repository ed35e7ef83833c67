"""``lakehouse.spark.read(...).count()`` is answered from the scan plan, exactly.

The count of a read without ``where`` is the plan's live rows (each file's
rows minus its deletion vector), with no Spark job; every other count (after
a transformation, of a cached frame) runs in Spark. Each case compares with
the rows Spark actually returns.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

import lakehouse.spark as lhs

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("g", pa.int32())])


def _rows(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table(
        {"id": ids, "g": pa.array([i % 7 for i in range(start, start + n)], pa.int32())}
    )


@pytest.fixture(scope="module")
def lh(tmp_path_factory: Any) -> Any:
    lh = lakehouse.open(str(tmp_path_factory.mktemp("counted")))
    with lh.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table("ns.t", SCHEMA, properties={"compaction.auto": "false"})
        txn.append("ns.t", _rows(0, 30_000))  # Parquet
        txn.append("ns.t", _rows(30_000, 40))  # inlined
        txn.commit()
    return lh


def _jobs(spark: Any, fn: Any) -> tuple[Any, int]:
    sc = spark.sparkContext
    sc.setJobGroup("lh-counted", "count test")
    try:
        out = fn()
        return out, len(sc.statusTracker().getJobIdsForGroup("lh-counted"))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.cancelJobGroup("lh-counted")


def _actual(spark: Any, lh: Any, **kw: Any) -> int:
    return lhs.read(lh, spark, "ns.t", **kw).toArrow().num_rows


def test_count_after_deletes_is_exact_and_runs_no_job(spark: Any, lh: Any) -> None:
    v0 = lh.version
    lhs.delete(lh, spark, "ns.t", "id % 10 = 3 OR id >= 30030")
    n, jobs = _jobs(spark, lambda: lhs.read(lh, spark, "ns.t").count())
    assert jobs == 0
    assert (
        n == _actual(spark, lh) == sum(1 for i in range(30_040) if not (i % 10 == 3 or i >= 30_030))
    )
    # an older version: its own deletion vectors
    assert lhs.read(lh, spark, "ns.t", version=v0).count() == _actual(spark, lh, version=v0)


def test_transformed_and_cached_frames_count_in_spark(spark: Any, lh: Any) -> None:
    df = lhs.read(lh, spark, "ns.t")
    n, jobs = _jobs(spark, lambda: df.where("g = 3").count())
    assert jobs > 0 and n == sum(1 for r in df.toArrow().column("g").to_pylist() if r == 3)
    n, jobs = _jobs(spark, lambda: df.groupBy().count().collect()[0][0])
    assert jobs > 0 and n == df.count()
    cached = lhs.read(lh, spark, "ns.t").cache()
    try:
        n, jobs = _jobs(spark, cached.count)  # materialises the cache, as users expect
        assert jobs > 0 and n == _actual(spark, lh)
        assert cached.is_cached
    finally:
        cached.unpersist()


def test_count_inside_a_transaction_sees_its_own_changes(spark: Any, lh: Any) -> None:
    with lh.begin() as txn:
        before = lhs.read(lh, spark, "ns.t", txn=txn).count()
        txn.append("ns.t", _rows(50_000, 5))
        lhs.delete(lh, spark, "ns.t", "id < 100", txn=txn)
        df = lhs.read(lh, spark, "ns.t", txn=txn)
        assert df.count() == df.toArrow().num_rows == before + 5 - 90
        txn.rollback()
    assert lhs.read(lh, spark, "ns.t").count() == before


def test_statement_results_are_answered_locally_and_equal_what_spark_returns(
    spark: Any, lh: Any
) -> None:
    from lakehouse.spark.counted import with_rows

    frame = spark.sql("SELECT * FROM VALUES (CAST(3 AS BIGINT), TRUE) AS v(n, ok)")
    answered = with_rows(frame, [(3, True)])
    in_spark = answered.select("*")  # a transformation: an ordinary frame, run by Spark
    assert answered.collect() == in_spark.collect()
    assert answered.first() == in_spark.first() == answered.head()
    assert answered.take(5) == in_spark.take(5) and answered.head(0) == []
    assert answered.count() == in_spark.count() == 1
    assert answered.columns == ["n", "ok"] and answered.first()["n"] == 3
    # a SQL statement's result is one: its row is what Spark holds
    got = lhs.sql(lh, spark, "DELETE FROM ns.t WHERE id < 0")
    assert got.collect() == got.select("*").collect()
    assert got.collect()[0].num_affected_rows == 0
