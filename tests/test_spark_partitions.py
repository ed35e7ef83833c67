"""lakehouse.spark on partitioned tables: hidden partitioning in writes, merges,
``mode="replace_partitions"`` and reads pruned on the driver.

One SparkSession for the module (tests/spark_fixtures.py). Every check is
against the lakehouse's own partitioning (``lakehouse.partition.split`` of the
rows with pyarrow), so Spark's per-row partition keys must agree with it
exactly, nulls included.
"""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from parquet_files import PARQUET

import lakehouse
from lakehouse import partition
from lakehouse.errors import DataFileMissing

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
from pyspark.sql import functions as F

import lakehouse.spark as lhs
from lakehouse.spark.partitions import grouped

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

UTC = dt.UTC
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("local", pa.timestamp("us")),
        ("d", pa.date32()),
        ("country", pa.string()),
        ("qty", pa.int32()),
        ("flag", pa.bool_()),
        ("amount", pa.float64()),
    ]
)
START = 1_704_067_200  # 2024-01-01T00:00:00Z


@pytest.fixture(autouse=True)
def utc(spark):
    """Spark reads timestamp literals in the session's zone: UTC here (restored after)."""
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    yield
    spark.conf.set("spark.sql.session.timeZone", old)


@pytest.fixture
def lh(tmp_path):
    h = lakehouse.open(str(tmp_path / "lh"), kv_options={"fsync": False})
    with h.begin() as txn:
        txn.create_namespace("ns")
    yield h
    h.close()


def create(lh, name, partition_by, schema=SCHEMA):
    with lh.begin() as txn:
        txn.create_table(name, schema, PARQUET, partition_by=partition_by)  # files: the point


COUNTRIES = ("fr", "us", "dé", "日本")


def frame(spark, start, stop, *, parts=3, step_s=7_919, tag=""):
    """Rows ``start..stop`` spread over days, hours, years (with nulls), negative and
    multi-byte values, in ``parts`` Spark partitions that each hold every partition."""
    i = F.col("id")
    secs = F.lit(START - 400 * 86_400) + i * step_s  # from late 2022 on
    return spark.range(start, stop, numPartitions=parts).select(
        i,
        F.when(i % 17 == 0, F.lit(None)).otherwise(F.timestamp_seconds(secs)).alias("ts"),
        F.timestamp_seconds(secs + 3_600 * (i % 5)).cast("timestamp_ntz").alias("local"),
        F.date_add(F.lit(dt.date(1969, 12, 20)), (i * 37 % 900).cast("int")).alias("d"),
        F.when(i % 11 == 0, F.lit(None))
        .otherwise(F.element_at(F.array(*map(F.lit, COUNTRIES)), (i % 4 + 1).cast("int")))
        .alias("country"),
        ((i * 7919) % 200 - 100).cast("int").alias("qty"),
        F.when(i % 13 == 0, F.lit(None)).otherwise(i % 2 == 0).alias("flag"),
        (i / 3 + F.lit(0.5)).alias("amount") if not tag else F.lit(-1.0).alias("amount"),
    )


def arrow(df):
    return df.toArrow().cast(SCHEMA)


def data_dir(lh):
    return lh.data_location()[0][len("file://") :]


def file_rows(lh, f):
    return pq.read_table(pa.BufferReader(lh.data_store.get(f.path)))


def check_layout(lh, table):
    """Every file holds exactly the partition its record says (checked with
    lakehouse.partition.split on the file's rows); returns {partition: files}."""
    d = lh.describe_table(table)
    names = d.names_by_id
    per_partition: Counter = Counter()
    for f in lh.list_data_files(table):
        assert f.spec_id == d.spec_id
        groups = partition.split(d.spec, file_rows(lh, f), names)
        assert len(groups) == 1, f"{f.path} holds {len(groups)} partitions"
        assert partition.values_dict(d.spec, groups[0][0]) == f.partition
        per_partition[tuple(sorted(f.partition.items()))] += 1
    return per_partition


def expected_partitions(lh, table):
    """{partition: rows} of the table's rows by lakehouse.partition.split (pyarrow)."""
    d = lh.describe_table(table)
    rows = lh.read(table)
    return {
        tuple(sorted(partition.values_dict(d.spec, v).items())): len(idx)
        for v, idx in partition.split(d.spec, rows, d.names_by_id)
    }


def rows_by_partition(lh, table):
    out: Counter = Counter()
    for f in lh.list_data_files(table):
        out[tuple(sorted(f.partition.items()))] += f.record_count - f.deleted_rows
    return dict(out)


def sorted_rows(t):
    return sorted(t.to_pylist(), key=lambda r: r["id"])


# -- writes -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec",
    [
        ["day(ts)"],
        ["bucket(8, id)", "country"],
        ["month(ts)", "year(d)", "flag"],
        ["hour(local)", "truncate(1, country)"],
        ["day(local)", "truncate(50, qty)", "bucket(3, country)"],
        ["d", "month(d)", "bucket(4, ts)"],
    ],
)
def test_partitioned_write_one_file_per_partition(spark, lh, spec):
    create(lh, "ns.t", spec)
    df = frame(spark, 0, 300)
    lhs.write(lh, df, "ns.t")
    layout = check_layout(lh, "ns.t")
    # rows repartitioned by partition: one file per partition (not one per task)
    assert all(n == 1 for n in layout.values()), layout
    assert rows_by_partition(lh, "ns.t") == expected_partitions(lh, "ns.t")
    # the rows are the DataFrame's, and the hidden key is nowhere
    got = lh.read("ns.t")
    assert got.schema.names == SCHEMA.names
    assert sorted_rows(got) == sorted_rows(arrow(df))
    assert sorted(r.id for r in lhs.read(lh, spark, "ns.t").collect()) == list(range(300))


def test_write_already_grouped_is_not_shuffled(spark, lh):
    by_country = frame(spark, 0, 100).repartition(3, "country")
    assert grouped(by_country, {"country"})
    assert not grouped(by_country, {"flag"})
    assert not grouped(frame(spark, 0, 100), {"country"})
    assert grouped(frame(spark, 0, 100, parts=1), set())
    create(lh, "ns.t", ["country"])
    lhs.write(lh, by_country, "ns.t")
    layout = check_layout(lh, "ns.t")
    assert all(n == 1 for n in layout.values())
    assert len(layout) == 5  # fr, us, dé, 日本, null


def test_distribution_mode_none_writes_the_tasks_as_they_are(spark, lh):
    with lh.begin() as txn:
        txn.create_table(
            "ns.t",
            SCHEMA,
            {"write.distribution-mode": "none", **PARQUET},
            partition_by=["country"],
        )
    lhs.write(lh, frame(spark, 0, 120, parts=3), "ns.t")
    layout = check_layout(lh, "ns.t")  # still one partition per file ...
    assert sorted(layout.values()) == [3] * 5  # ... but one file per partition per task
    assert rows_by_partition(lh, "ns.t") == expected_partitions(lh, "ns.t")
    with lh.begin() as txn:
        txn.alter_table("ns.t", set_properties={"write.distribution-mode": "range"})
    with pytest.raises(ValueError, match=r"write\.distribution-mode"):
        lhs.write(lh, frame(spark, 0, 10), "ns.t")
    assert lh.table_stats("ns.t").rows == 120


def test_sort_keys_order_each_file(spark, lh):
    create(lh, "ns.t", ["bucket(2, id)"])
    with lh.begin() as txn:
        txn.alter_table("ns.t", sort_keys=["qty"])
    lhs.write(lh, frame(spark, 0, 300), "ns.t")
    for f in lh.list_data_files("ns.t"):
        qty = file_rows(lh, f).column("qty").to_pylist()
        assert qty == sorted(qty)


def test_merge_writes_partitioned_files(spark, lh):
    create(lh, "ns.t", ["day(ts)", "country"])
    lhs.write(lh, frame(spark, 0, 200), "ns.t")
    # ids 150..249: 50 updates (new amount), 50 inserts
    src = frame(spark, 150, 250, tag="new")
    res = lhs.merge(lh, src, "ns.t", on=["id"])
    assert (res.updated, res.inserted) == (50, 50)
    check_layout(lh, "ns.t")
    assert rows_by_partition(lh, "ns.t") == expected_partitions(lh, "ns.t")
    got = {r["id"]: r["amount"] for r in lh.read("ns.t").to_pylist()}
    assert len(got) == 250
    assert all(got[i] == -1.0 for i in range(150, 250))
    assert all(got[i] == i / 3 + 0.5 for i in range(150))


# -- replace_partitions -----------------------------------------------------------------------
def day_of(r):
    return None if r["ts"] is None else r["ts"].date()


def test_replace_partitions_replaces_exactly_the_partitions_written(spark, lh):
    create(lh, "ns.t", ["day(ts)"])
    lhs.write(lh, frame(spark, 0, 500, step_s=3_600), "ns.t")  # 21 days, 24 rows a day
    before = lh.read("ns.t").to_pylist()
    lo, hi = dt.datetime(2022, 11, 28, tzinfo=UTC), dt.datetime(2022, 11, 29, tzinfo=UTC)
    later = dt.datetime(2022, 11, 30, 6, tzinfo=UTC)
    new = (
        frame(spark, 1_000, 1_100, step_s=3_600, tag="new")
        .withColumn("ts", F.col("ts") - F.expr("INTERVAL 1000 HOURS"))
        .where(((F.col("ts") >= lo) & (F.col("ts") < hi)) | (F.col("ts") == later))
    )
    new_rows = arrow(new).to_pylist()
    written = {day_of(r) for r in new_rows}
    assert written == {lo.date(), later.date()}
    v = lhs.write(lh, new, "ns.t", mode="replace_partitions")
    assert v == lh.version
    keep = [r for r in before if day_of(r) not in written]
    assert sorted_rows(lh.read("ns.t")) == sorted(keep + new_rows, key=lambda r: r["id"])
    assert len(keep) < len(before) - len(new_rows)  # whole days went, not single rows
    check_layout(lh, "ns.t")


def test_replace_partitions_across_partition_evolution(spark, lh):
    # rows written unpartitioned, then the table is partitioned by day: a
    # replace_partitions deletes the old files' rows of the days it writes
    create(lh, "ns.t", None)
    lhs.write(lh, frame(spark, 0, 300, step_s=3_600), "ns.t")
    before = lh.read("ns.t").to_pylist()
    with lh.begin() as txn:
        txn.alter_table("ns.t", partition_by=["day(ts)"])
    target = dt.date(2022, 11, 27)
    new = spark.createDataFrame(
        [(10_000, dt.datetime(2022, 11, 27, 12, tzinfo=UTC))], "id long, ts timestamp"
    )
    lhs.write(lh, new, "ns.t", mode="replace_partitions")
    got = lh.read("ns.t").to_pylist()
    assert [r["id"] for r in got if day_of(r) == target] == [10_000]
    others = sorted(r["id"] for r in before if day_of(r) != target)
    assert len(others) < len(before)
    assert sorted(r["id"] for r in got if r["id"] != 10_000) == others


def test_replace_partitions_unpartitioned_is_overwrite(spark, lh):
    create(lh, "ns.t", None)
    lhs.write(lh, frame(spark, 0, 100), "ns.t")
    lhs.write(lh, frame(spark, 500, 510), "ns.t", mode="replace_partitions")
    assert sorted(lh.read("ns.t").column("id").to_pylist()) == list(range(500, 510))


def test_replace_partitions_with_nulls_and_buckets(spark, lh):
    create(lh, "ns.t", ["bucket(4, id)", "country"])
    lhs.write(lh, frame(spark, 0, 400), "ns.t")
    before = lh.read("ns.t")
    d = lh.describe_table("ns.t")
    new = frame(spark, 1_000, 1_030).where(F.col("country").isNull() | (F.col("country") == "fr"))
    new_t = arrow(new)
    hit = {v for v, _ in partition.split(d.spec, new_t, d.names_by_id)}
    lhs.write(lh, new, "ns.t", mode="replace_partitions")
    old_parts = partition.split(d.spec, before, d.names_by_id)
    keep = [i for v, idx in old_parts if v not in hit for i in idx.tolist()]
    want = before.take(keep).to_pylist() + new_t.to_pylist()
    assert sorted_rows(lh.read("ns.t")) == sorted(want, key=lambda r: r["id"])
    check_layout(lh, "ns.t")


def test_replace_partitions_inside_txn_and_bad_mode(spark, lh):
    create(lh, "ns.t", ["country"])
    lhs.write(lh, frame(spark, 0, 40), "ns.t")
    with pytest.raises(ValueError, match="replace_partitions"):
        lhs.write(lh, frame(spark, 0, 4), "ns.t", mode="replace")
    with pytest.raises(ValueError, match="where is only used"):
        lhs.write(lh, frame(spark, 0, 4), "ns.t", mode="replace_partitions", where="id > 0")
    with lh.begin() as txn:
        new = frame(spark, 100, 104)
        assert lhs.write(lh, new, "ns.t", mode="replace_partitions", txn=txn) is None
        txn.append("ns.t", pa.table({"id": [999]}, schema=pa.schema([SCHEMA.field("id")])))
    countries = {r["country"] for r in frame(spark, 100, 104).select("country").collect()}
    got = lh.read("ns.t").to_pylist()
    assert {r["id"] for r in got if r["country"] in countries} >= {100, 101, 102, 103}
    assert not [r for r in got if r["country"] in countries and r["id"] < 40]
    assert 999 in {r["id"] for r in got}


# -- reads ------------------------------------------------------------------------------------
def test_read_where_prunes_files_before_spark(spark, lh):
    create(lh, "ns.t", ["day(ts)"])
    lhs.write(lh, frame(spark, 0, 400, step_s=3_600), "ns.t")
    day = dt.date(2022, 11, 30)
    want = sorted(r["id"] for r in lh.read("ns.t").to_pylist() if day_of(r) == day)
    assert want
    # black box: every other partition's files are gone from disk
    for f in lh.list_data_files("ns.t"):
        if f.partition["ts_day"] != (day - dt.date(1970, 1, 1)).days:
            os.remove(os.path.join(data_dir(lh), f.path))
    where = "ts >= '2022-11-30' AND ts < '2022-12-01'"
    got = lhs.read(lh, spark, "ns.t", where=where)
    assert sorted(r.id for r in got.collect()) == want
    # a condition on another column is applied by Spark on the pruned files
    got = lhs.read(lh, spark, "ns.t", where=where + " AND id % 2 = 0")
    assert sorted(r.id for r in got.collect()) == [i for i in want if i % 2 == 0]
    # what the lakehouse cannot parse prunes nothing (Spark needs every file) ...
    with pytest.raises(DataFileMissing):
        lhs.read(lh, spark, "ns.t", where="dayofmonth(ts) = 30")
    # ... but the conjuncts it can parse still do
    got = lhs.read(lh, spark, "ns.t", where=where + " AND dayofmonth(ts) = 30")
    assert sorted(r.id for r in got.collect()) == want


def test_delete_scans_only_the_partitions_its_condition_needs(spark, lh):
    create(lh, "ns.t", ["country"])
    lhs.write(lh, frame(spark, 0, 200), "ns.t")
    rows = lh.read("ns.t").to_pylist()
    fr = [r["id"] for r in rows if r["country"] == "fr"]
    for f in lh.list_data_files("ns.t"):  # black box: only fr's file stays on disk
        if f.partition["country"] != "fr":
            os.remove(os.path.join(data_dir(lh), f.path))
    n = lhs.delete(lh, spark, "ns.t", "country = 'fr' AND id % 2 = 0")
    assert n == sum(1 for i in fr if i % 2 == 0) > 0
    left = lhs.read(lh, spark, "ns.t", where="country = 'fr'").collect()
    assert sorted(r.id for r in left) == [i for i in sorted(fr) if i % 2]


def test_read_where_without_pruning_is_still_filtered(spark, lh):
    create(lh, "ns.t", ["bucket(4, id)"])
    lhs.write(lh, frame(spark, 0, 200), "ns.t")
    got = lhs.read(lh, spark, "ns.t", where="dayofmonth(ts) = 3 OR id IN (1, 2)")
    want = [
        r["id"]
        for r in lh.read("ns.t").to_pylist()
        if r["id"] in (1, 2) or (r["ts"] is not None and r["ts"].day == 3)
    ]
    assert sorted(r.id for r in got.collect()) == sorted(want)
    # bucket pruning: id = 5 needs only its bucket's file
    plan = lh.scan_plan("ns.t", where="id = 5")
    assert len(plan) == 1 and len(lh.scan_plan("ns.t")) == 4
    assert [r.id for r in lhs.read(lh, spark, "ns.t", where="id = 5").collect()] == [5]
    with pytest.raises(ValueError, match="nosuch"):
        lhs.read(lh, spark, "ns.t", where="nosuch = 1")


def test_read_where_in_txn_and_old_version(spark, lh):
    create(lh, "ns.t", ["country"])
    v1 = lhs.write(lh, frame(spark, 0, 100), "ns.t")
    lhs.write(lh, frame(spark, 100, 200), "ns.t")
    n_fr = sum(1 for r in lh.read("ns.t", columns=["country"]).to_pylist() if r["country"] == "fr")
    assert lhs.read(lh, spark, "ns.t", where="country = 'fr'").count() == n_fr
    old = lhs.read(lh, spark, "ns.t", version=v1, where="country = 'fr'")
    assert {r.id for r in old.collect()} == {i for i in range(100) if i % 11 and i % 4 == 0}
    with lh.begin() as txn:
        txn.delete("ns.t", "id < 50")
        got = lhs.read(lh, spark, "ns.t", where="country = 'fr'", txn=txn)
        assert all(r.id >= 50 and r.country == "fr" for r in got.collect())


# -- transforms through the Arrow UDF, and S3 (Python tasks) ----------------------------------
ODD = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("price", pa.decimal128(10, 2)),
        ("ratio", pa.float64()),
        ("blob", pa.binary()),
        ("at", pa.timestamp("us", tz="UTC")),
    ]
)


def odd_frame(spark, n=60):
    i = F.col("id")
    return spark.range(0, n, numPartitions=2).select(
        i,
        F.when(i % 7 == 0, F.lit(None))
        .otherwise(((i * 37) % 400 - 200) / F.lit(4))
        .cast("decimal(10,2)")
        .alias("price"),
        F.when(i % 9 == 0, F.lit(None)).otherwise((i % 3) / F.lit(2.0) - 0.5).alias("ratio"),
        F.when(i % 5 == 0, F.lit(None))
        .otherwise(F.unhex(F.lpad(F.hex(i % 6), 4, "a")))
        .alias("blob"),
        F.timestamp_seconds(F.lit(START) + (i % 4) * 3_600 + i).alias("at"),
    )


@pytest.mark.parametrize(
    "spec",
    [["truncate(50, price)", "ratio"], ["price", "truncate(1, blob)"], ["at", "bucket(3, price)"]],
)
def test_decimal_float_binary_timestamp_partitions(spark, lh, spec):
    create(lh, "ns.o", spec, ODD)
    df = odd_frame(spark)
    lhs.write(lh, df, "ns.o")
    check_layout(lh, "ns.o")
    assert rows_by_partition(lh, "ns.o") == expected_partitions(lh, "ns.o")
    want = df.toArrow().cast(ODD)
    assert sorted_rows(lh.read("ns.o")) == sorted_rows(want)


@pytest.mark.s3
def test_partitioned_write_replace_and_pruned_read_on_s3(spark, s3_bucket, s3_options):
    h = lakehouse.open(f"s3://{s3_bucket}/lh", storage_options=s3_options)
    try:
        with h.begin() as txn:
            txn.create_namespace("ns")
            txn.create_table("ns.t", SCHEMA, PARQUET, partition_by=["bucket(4, id)", "day(ts)"])
        lhs.write(h, frame(spark, 0, 200, step_s=20_000), "ns.t")
        d = h.describe_table("ns.t")
        files = h.list_data_files("ns.t")
        rows = h.read("ns.t")
        check_layout(h, "ns.t")
        assert rows_by_partition(h, "ns.t") == expected_partitions(h, "ns.t")
        assert all(
            n == 1 for n in Counter(tuple(sorted(f.partition.items())) for f in files).values()
        )
        # replace the partitions of ids 0..9 (their buckets and days)
        new = frame(spark, 0, 10, step_s=20_000, tag="new")
        lhs.write(h, new, "ns.t", mode="replace_partitions")
        new_t = arrow(new)
        hit = {v for v, _ in partition.split(d.spec, new_t, d.names_by_id)}
        keep = [
            i
            for v, idx in partition.split(d.spec, rows, d.names_by_id)
            if v not in hit
            for i in idx.tolist()
        ]
        want = rows.take(keep).to_pylist() + new_t.to_pylist()
        assert sorted_rows(h.read("ns.t")) == sorted(want, key=lambda r: r["id"])
        # a pruned read: only the files of id 5's bucket are planned, and Spark reads them
        plan = h.scan_plan("ns.t", where="id = 5")
        assert 0 < len(plan) < len(h.scan_plan("ns.t"))
        got = lhs.read(h, spark, "ns.t", where="id = 5").collect()
        assert [(r.id, r.amount) for r in got] == [(5, -1.0)]
    finally:
        h.close()


@pytest.mark.parametrize(
    "spec", [["year(ts)", "hour(local)"], ["month(local)", "day(ts)"], ["hour(ts)", "year(d)"]]
)
def test_time_transforms_around_the_epoch(spark, lh, spec):
    # floor, not truncation toward zero, for instants before 1970 (Iceberg's rule)
    micros = [-1, 0, 1, -86_400_000_000, -3_600_000_001, -31_536_000_000_001, 1_709_251_199_999_999]
    create(lh, "ns.e", spec)
    df = spark.createDataFrame([(i, m) for i, m in enumerate(micros)], "id long, m long").select(
        "id",
        F.timestamp_micros("m").alias("ts"),
        F.timestamp_micros("m").cast("timestamp_ntz").alias("local"),
        F.date_from_unix_date((F.col("m") / 86_400_000_000).cast("int") - 1).alias("d"),
    )
    lhs.write(lh, df, "ns.e")
    layout = check_layout(lh, "ns.e")
    assert rows_by_partition(lh, "ns.e") == expected_partitions(lh, "ns.e")
    assert sum(layout.values()) == len(expected_partitions(lh, "ns.e"))


def test_add_files_with_known_partitions_and_replace(lh):
    """The driver-side seam the Spark calls use: ``txn.add_files(partitions=...,
    replace_partitions=True)``, with files written by someone else (pyarrow here)."""
    small = pa.schema([pa.field("id", pa.int64(), nullable=False), ("country", pa.string())])

    def put(txn, table, ids, country):
        path = txn.new_data_path(table)
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({"id": ids, "country": [country] * len(ids)}, schema=small), sink)
        lh.data_store.put(path, sink.getvalue().to_pybytes())
        return path

    with lh.begin() as txn:
        txn.create_table("ns.p", small, partition_by=["country"])
        txn.create_table("ns.u", small)
    with lh.begin() as txn:
        paths = [put(txn, "ns.p", [1, 2], "fr"), put(txn, "ns.p", [3], "us")]
        with pytest.raises(ValueError, match="2 files"):
            txn.add_files("ns.p", paths, partitions=[("fr",)])
        assert txn.add_files("ns.p", paths, partitions=[("fr",), ("us",)]) == 3
        txn.append("ns.u", pa.table({"id": [1, 2], "country": ["fr", "us"]}, schema=small))
    assert {f.partition["country"] for f in lh.list_data_files("ns.p")} == {"fr", "us"}
    with lh.begin() as txn:
        new = [put(txn, "ns.p", [10], "fr")]
        txn.add_files("ns.p", new, partitions=[("fr",)], replace_partitions=True)
        txn.add_files("ns.u", [put(txn, "ns.u", [7], "de")], replace_partitions=True)
    assert sorted(lh.read("ns.p").column("id").to_pylist()) == [3, 10]
    assert lh.read("ns.u").to_pylist() == [{"id": 7, "country": "de"}]
