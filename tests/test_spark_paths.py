"""lakehouse.spark's mechanics: type rules, both writers, both readers.

* the DataFrame-vs-table rules (:mod:`lakehouse.spark.types`) as tables of
  cases, without Spark;
* the readers over plain Parquet files with hand-made scan entries (renamed
  columns, deletions): Spark's reader with the broadcast anti-join and the
  Python-task reader return the same rows;
* the Python-task writer: a speculative duplicate attempt's file is never
  registered and is deleted; tables whose types Spark does not write
  exactly (``large_string``, ``timestamp[ns]``, ``uint32``) go through it
  and through the Python-task reader on a local lakehouse.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from parquet_files import PARQUET
from pyroaring import BitMap

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
from pyspark.sql import functions as F
from pyspark.sql import types as T

import lakehouse.spark as lhs
from lakehouse.spark.location import Location
from lakehouse.spark.reader import FILE_COL, ROW_COL, _jvm_frame, _python_frame
from lakehouse.spark.types import match_columns, safe_cast, spark_type
from lakehouse.spark.writer import _task_writer, write_python

pytest_plugins = ["spark_fixtures"]


# -- type rules (no Spark session) ----------------------------------------------------------------
@pytest.mark.parametrize(
    "src, dst, ok",
    [
        (T.IntegerType(), T.LongType(), True),
        (T.ByteType(), T.ShortType(), True),
        (T.LongType(), T.IntegerType(), False),
        (T.IntegerType(), T.DoubleType(), True),
        (T.LongType(), T.DoubleType(), False),  # 64-bit ints do not fit a double exactly
        (T.ShortType(), T.FloatType(), True),
        (T.IntegerType(), T.FloatType(), False),
        (T.FloatType(), T.DoubleType(), True),
        (T.DoubleType(), T.FloatType(), False),
        (T.IntegerType(), T.DecimalType(10, 0), True),
        (T.IntegerType(), T.DecimalType(12, 3), False),
        (T.DecimalType(10, 2), T.DecimalType(12, 2), True),
        (T.DecimalType(10, 2), T.DecimalType(12, 4), True),
        (T.DecimalType(10, 2), T.DecimalType(10, 3), False),
        (T.DecimalType(12, 2), T.DoubleType(), False),
        (T.StringType(), T.IntegerType(), False),
        (T.IntegerType(), T.StringType(), False),
        (T.NullType(), T.TimestampType(), True),
        (T.DateType(), T.TimestampType(), False),
        (T.TimestampNTZType(), T.TimestampType(), False),
        (T.ArrayType(T.IntegerType()), T.ArrayType(T.LongType()), True),
        (T.ArrayType(T.LongType()), T.ArrayType(T.IntegerType()), False),
        (
            T.StructType([T.StructField("a", T.IntegerType())]),
            T.StructType([T.StructField("a", T.LongType())]),
            True,
        ),
        (
            T.StructType([T.StructField("a", T.IntegerType())]),
            T.StructType([T.StructField("b", T.LongType())]),
            False,
        ),
    ],
)
def test_safe_cast_rule(src, dst, ok):
    assert safe_cast(src, dst) is ok


@pytest.mark.parametrize(
    "arrow, spark",
    [
        (pa.int8(), T.ByteType()),
        (pa.uint32(), T.LongType()),
        (pa.large_string(), T.StringType()),
        (pa.timestamp("ns", tz="Europe/Paris"), T.TimestampType()),
        (pa.timestamp("us"), T.TimestampNTZType()),
        (pa.decimal128(20, 4), T.DecimalType(20, 4)),
        (pa.list_(pa.int32()), T.ArrayType(T.IntegerType(), True)),
        (pa.date32(), T.DateType()),
    ],
)
def test_spark_type_of_arrow_type(arrow, spark):
    assert spark_type(arrow) == spark


def test_spark_type_refuses_what_spark_cannot_hold():
    with pytest.raises(TypeError, match="'d'"):
        spark_type(pa.duration("s"), "d")


def test_match_columns_plans():
    table = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("n", pa.int32()), ("s", pa.string())]
    )
    df = T.StructType(
        [T.StructField("id", T.IntegerType(), True), T.StructField("n", T.IntegerType())]
    )
    plans = {p.name: p for p in match_columns(df, table, "t")}
    assert (plans["id"].action, plans["id"].check_not_null) == ("cast", True)
    assert plans["n"].action == "keep" and plans["s"].action == "null"
    dup = T.StructType([T.StructField("id", T.LongType()), T.StructField("id", T.LongType())])
    with pytest.raises(ValueError, match="twice"):
        match_columns(dup, table, "t")


# -- readers over plain Parquet ------------------------------------------------------------
@dataclass
class Entry:
    path: str
    url: str
    rows: int
    deleted: Any
    columns: dict[str, str] = field(default_factory=dict)
    size: int = 0
    footer_size: int | None = None  # no checksums recorded: nothing to check
    footer_crc: int | None = None
    crc: int | None = None


@pytest.fixture
def plain_files(tmp_path):
    """Two files of one table: the first written before ``name`` was renamed from ``label``
    and before ``score`` existed; rows 1 and 3 of it deleted, row 0 of the second."""
    base = tmp_path / "data"
    (base / "t").mkdir(parents=True)
    pq.write_table(
        pa.table({"id": pa.array([0, 1, 2, 3], pa.int32()), "label": ["a", "b", "c", "d"]}),
        base / "t" / "f1.parquet",
    )
    pq.write_table(
        pa.table({"id": pa.array([4, 5], pa.int64()), "name": ["e", "f"], "score": [0.5, 1.5]}),
        base / "t" / "f2.parquet",
    )
    loc = Location("file://" + str(base))
    files = [
        Entry(
            "t/f1.parquet",
            loc.url("t/f1.parquet"),
            4,
            BitMap([1, 3]),
            {"id": "id", "name": "label"},
        ),
        Entry(
            "t/f2.parquet",
            loc.url("t/f2.parquet"),
            2,
            BitMap([0]),
            {"id": "id", "name": "name", "score": "score"},
        ),
    ]
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
    return loc, files, schema


@pytest.mark.spark
@pytest.mark.parametrize("reader", ["jvm", "python"])
def test_readers_rename_widen_and_drop_deleted_rows(spark, plain_files, reader):
    loc, files, schema = plain_files
    if reader == "jvm":
        frame = _jvm_frame(spark, files, schema, positions=True)
    else:
        frame = _python_frame(spark, files, schema, loc, positions=True)
    rows = sorted((r.id, r.name, r.score, r[FILE_COL], r[ROW_COL]) for r in frame.collect())
    assert rows == [
        (0, "a", None, "f1.parquet", 0),
        (2, "c", None, "f1.parquet", 2),
        (5, "f", 1.5, "f2.parquet", 1),
    ]
    assert dict(frame.dtypes)["id"] == "bigint"


# -- the Python-task writer ---------------------------------------------------------------
@pytest.mark.spark
def test_speculative_duplicate_attempt_is_never_registered(spark, tmp_path):
    loc = Location("file://" + str(tmp_path))
    schema = pa.schema([("x", pa.int64())])
    job = "feedc0de" * 4
    # a "losing" attempt of partition 0 that completed its file (as a speculative copy can)
    loser = _task_writer(loc, "t", job, schema, None)
    list(loser(iter([pa.record_batch({"x": pa.array([1, 2, 3], pa.int64())})])))
    (stray,) = loc.list("t")
    df = spark.range(0, 10, numPartitions=2).select(F.col("id").alias("x"))
    done = write_python(df, loc, "t", schema, "test", job=job)
    kept = done[""]
    assert stray not in kept and len(kept) == 2
    assert sorted(loc.list("t")) == sorted(kept)
    assert sum(pq.read_metadata(loc.fs_path(p)).num_rows for p in kept) == 10


@pytest.mark.spark
def test_python_paths_on_a_local_lakehouse(spark, tmp_path):
    """Types Spark does not write (and some it cannot read) exactly: Python tasks."""
    schema = pa.schema(
        [
            pa.field("id", pa.uint32(), nullable=False),
            ("s", pa.large_string()),
            ("t", pa.timestamp("ns", tz="UTC")),
        ]
    )
    with lakehouse.open(str(tmp_path / "lh"), kv_options={"fsync": False}) as lh:
        with lh.begin() as txn:
            txn.create_namespace("n")
            txn.create_table("n.t", schema, PARQUET)  # executors' files: the point
        df = spark.range(0, 50, numPartitions=2).select(
            F.col("id"),
            F.concat(F.lit("s"), F.col("id").cast("string")).alias("s"),
            F.timestamp_seconds(F.col("id")).alias("t"),
        )
        lhs.write(lh, df, "n.t")
        t = lh.read("n.t")
        assert [f.type for f in t.schema] == [f.type for f in schema]
        assert sorted(t.column("id").to_pylist()) == list(range(50))
        assert lhs.delete(lh, spark, "n.t", "id >= 40") == 10
        got = lhs.read(lh, spark, "n.t")
        assert dict(got.dtypes) == {"id": "bigint", "s": "string", "t": "timestamp"}
        assert sorted(r.id for r in got.collect()) == list(range(40))
        r = lhs.merge(lh, df.where("id >= 35"), "n.t", on="id")
        assert (r.inserted, r.updated) == (10, 5)
        assert lh.table_stats("n.t").rows == 50
        with pytest.raises(ValueError, match="cannot be cast safely"):
            lhs.write(lh, df.withColumn("id", F.col("id").cast("decimal(30,0)")), "n.t")
        base = lh.data_location()[0][len("file://") :]
        on_disk = set()
        for root, _, names in os.walk(base):
            on_disk |= {os.path.relpath(os.path.join(root, x), base) for x in names}
        # every file written is registered in some version (merge and delete kept old ones)
        assert {f.path for f in lh.list_data_files("n.t")} <= on_disk


@pytest.mark.spark
def test_jvm_reader_with_files_of_equal_size(spark, tmp_path):
    """Two files with deletions and the same byte size: the anti-join falls back to
    (file name, row index) keys."""
    base = tmp_path / "data"
    (base / "t").mkdir(parents=True)
    for name in ("a", "b"):
        pq.write_table(
            pa.table({"x": pa.array(range(10), pa.int64())}), base / "t" / f"{name}.parquet"
        )
    loc = Location("file://" + str(base))
    assert os.path.getsize(base / "t" / "a.parquet") == os.path.getsize(base / "t" / "b.parquet")
    files = [
        Entry("t/a.parquet", loc.url("t/a.parquet"), 10, BitMap([0, 1]), {"x": "x"}),
        Entry("t/b.parquet", loc.url("t/b.parquet"), 10, BitMap([9]), {"x": "x"}),
    ]
    schema = pa.schema([("x", pa.int64())])
    got = sorted(r.x for r in _jvm_frame(spark, files, schema, positions=False).collect())
    assert got == sorted([*range(2, 10), *range(9)])
    with_pos = _jvm_frame(spark, files, schema, positions=True)
    assert sorted((r[FILE_COL], r[ROW_COL]) for r in with_pos.where("x = 5").collect()) == [
        ("a.parquet", 5),
        ("b.parquet", 5),
    ]
