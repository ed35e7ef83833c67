"""lakehouse.spark with the lakehouse on S3 (moto on 127.0.0.1).

This JVM has no S3 connector, so every byte of table data moves through
Python tasks: the mapInArrow writer (pyarrow + s3fs) and the Python-task
reader that applies deletion vectors itself. The same API calls as
tests/test_spark.py, on a smaller scale, plus the retry and leftover-file
checks that matter most where there is no rename.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from parquet_files import PARQUET

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
from pyspark.sql import functions as F

import lakehouse.spark as lhs
from lakehouse.spark import SparkJobError

pytest_plugins = ["spark_fixtures"]
pytestmark = [pytest.mark.spark, pytest.mark.s3]

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)


@pytest.fixture
def lh(s3_bucket, s3_options):
    h = lakehouse.open(f"s3://{s3_bucket}/lh", storage_options=s3_options)
    with h.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table("ns.t", SCHEMA, PARQUET)  # executors' files on S3: the point
    yield h
    h.close()


def rows(spark, start, stop, name="n"):
    return spark.range(start, stop, numPartitions=2).select(
        F.col("id"),
        F.concat(F.lit(name), F.col("id").cast("string")).alias("name"),
        (F.col("id") / 2).alias("score"),
        F.timestamp_seconds(F.col("id")).alias("at"),
    )


def ids(frame):
    return sorted(r[0] for r in frame.select("id").collect())


def s3_data_files(s3_client, bucket):
    out = []
    for page in s3_client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="lh/data/"
    ):
        out += [o["Key"] for o in page.get("Contents", [])]
    return sorted(out)


def test_write_read_delete_merge_on_s3(spark, lh, s3_client, s3_bucket):
    assert lh.data_location()[0].startswith("s3://")
    v = lhs.write(lh, rows(spark, 0, 300), "ns.t")
    assert v == lh.version
    assert lh.table_stats("ns.t").rows == 300
    assert ids(lhs.read(lh, spark, "ns.t")) == list(range(300))
    t = lh.read("ns.t")
    assert [f.type for f in t.schema] == [f.type for f in SCHEMA]

    assert lhs.delete(lh, spark, "ns.t", "id % 3 = 0") == 100
    got = lhs.read(lh, spark, "ns.t")
    assert ids(got) == [i for i in range(300) if i % 3]
    assert got.where("id = 4").first().name == "n4"

    r = lhs.merge(lh, rows(spark, 295, 305, name="m"), "ns.t", on="id")
    assert (r.inserted, r.updated) == (6, 4)  # 295/296/298/299 live; 297 deleted; 300-304 new
    want = sorted([i for i in range(300) if i % 3] + [297, 300, 301, 302, 303, 304])
    assert ids(lhs.read(lh, spark, "ns.t")) == want
    assert sorted(lh.read("ns.t").column("id").to_pylist()) == want

    old = lhs.read(lh, spark, "ns.t", version=v)
    assert old.count() == 300
    lhs.register_views(lh, spark, version=v)
    assert spark.sql(f"SELECT count(*) AS n FROM `ns.t@v{v}`").first().n == 300

    registered = {f.path for f in lh.list_data_files("ns.t")}
    on_s3 = {k[len("lh/data/") :] for k in s3_data_files(s3_client, s3_bucket)}
    assert on_s3 == registered


def test_spark_and_python_write_one_version_on_s3(spark, lh):
    with lh.begin() as txn:
        lhs.write(lh, rows(spark, 0, 10), "ns.t", txn=txn)
        txn.append("ns.t", pa.table({"id": pa.array([99], pa.int64())}))
    assert lh.history()[0].version == lh.version == 2
    assert lh.table_stats("ns.t").rows == 11


def test_retried_task_and_failed_job_leave_nothing_on_s3(spark, lh, s3_client, s3_bucket):
    def flaky(x):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.attemptNumber() == 0 and ctx.partitionId() == 0 and x == 60:
            raise RuntimeError("first attempt dies")
        return x

    df = rows(spark, 0, 200).withColumn("id", F.udf(flaky, "long")(F.col("id")))
    lhs.write(lh, df, "ns.t")
    assert ids(lhs.read(lh, spark, "ns.t")) == list(range(200))
    registered = {f.path for f in lh.list_data_files("ns.t")}
    on_s3 = {k[len("lh/data/") :] for k in s3_data_files(s3_client, s3_bucket)}
    assert on_s3 == registered

    def always(x):
        if x == 150:
            raise RuntimeError("broken")
        return x

    bad = rows(spark, 0, 200).withColumn("id", F.udf(always, "long")(F.col("id")))
    v = lh.version
    with pytest.raises(SparkJobError):
        lhs.write(lh, bad, "ns.t")
    assert lh.version == v
    on_s3 = {k[len("lh/data/") :] for k in s3_data_files(s3_client, s3_bucket)}
    assert on_s3 == registered


def test_bad_data_on_s3_is_value_error(spark, lh):
    df = rows(spark, 0, 20).withColumn(
        "id", F.when(F.col("id") == 7, F.lit(None)).otherwise(F.col("id"))
    )
    with pytest.raises(ValueError, match=r"'id'.*not nullable"):
        lhs.write(lh, df, "ns.t")
    assert lh.version == 1
