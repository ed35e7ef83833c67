"""lakehouse.spark.positions: row positions found by executors, back as bitmaps.

``bitmap_frame`` folds ``(_lh_file, _lh_row)`` pairs into one 4 KiB bitmap per
(file, 32,768-row bucket); ``bitmaps_of`` decodes them on the driver. These
tests check the decode against the positions themselves: bucket edges, rows
of several files interleaved across tasks, more buckets than one decode chunk,
nothing found; then ``lhs.delete`` end to end against a pyarrow expectation.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
from pyroaring import BitMap
from pyspark.sql import functions as F

import lakehouse.spark as lhs
from lakehouse.spark import positions as P
from lakehouse.spark.reader import FILE_COL, ROW_COL

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

B = P.BUCKET_BITS
EDGES = [0, 1, B - 1, B, B + 1, 2 * B - 1, 2 * B, 3 * B - 1, 5_000_000 - 1]


def pairs_frame(spark, by_file: dict[str, list[int]], partitions: int = 3):
    """A frame of (_lh_file, _lh_row) rows, shuffled so files interleave across tasks."""
    rows = [(name, int(p)) for name, ps in by_file.items() for p in ps]
    rng = np.random.default_rng(7)
    order = rng.permutation(len(rows))
    rows = [rows[i] for i in order]
    df = spark.createDataFrame(rows, f"{FILE_COL} string, {ROW_COL} long")
    return df.repartition(partitions)


def found(frame) -> dict[str, BitMap]:
    by_name = {n: f"dir/{n}.parquet" for n in ("a", "b", "c", "d")}
    return P.collect_bitmaps(frame, by_name, "test positions")


def test_bucket_edges_of_several_interleaved_files(spark):
    want = {
        "a": EDGES,
        "b": [B - 1, B, 65_535, 65_536, 4_194_303, 4_194_304],
        "c": [7],
    }
    got = found(pairs_frame(spark, want))
    assert got == {f"dir/{n}.parquet": BitMap(ps) for n, ps in want.items()}


def test_bitmap_frame_rows_are_one_per_file_and_bucket(spark):
    want = {"a": EDGES, "b": [3, 4, B + 2]}
    got = P.bitmap_frame(pairs_frame(spark, want)).toArrow()
    assert set(got.column_names) == {FILE_COL, "_lh_bucket", "_lh_bits"}
    keys = sorted(zip(got.column(FILE_COL).to_pylist(), got.column("_lh_bucket").to_pylist()))
    expect = sorted({(n, p // B + 1) for n, ps in want.items() for p in ps})
    assert keys == expect  # buckets counted from 1
    assert {len(b) for b in got.column("_lh_bits").to_pylist()} == {B // 8}


def test_many_buckets_and_dense_runs_across_decode_chunks(spark):
    # file a: every 3rd row of 5M rows (153 buckets, more than one decode chunk);
    # file b: a dense run, scattered rows and a bucket's last row; generated on executors
    n = 5_000_000
    a = spark.range(0, n, 3, numPartitions=4).select(
        F.lit("a").alias(FILE_COL), F.col("id").alias(ROW_COL)
    )
    ids = np.arange(n)
    scattered = (ids * 7919) % 1009 < 4
    b_rows = ids[((ids >= 100_000) & (ids < 170_000)) | scattered | (ids == B * 100 - 1)]
    b = spark.range(0, n, numPartitions=4).where(
        F.col("id").between(100_000, 169_999)
        | (F.pmod(F.col("id") * 7919, F.lit(1009)) < 4)
        | (F.col("id") == B * 100 - 1)
    )
    b = b.select(F.lit("b").alias(FILE_COL), F.col("id").alias(ROW_COL))
    got = found(a.unionByName(b).repartition(3))
    assert got["dir/a.parquet"] == BitMap(range(0, n, 3))
    assert got["dir/b.parquet"] == BitMap(b_rows)
    assert len(got) == 2


def test_nothing_found_is_an_empty_dict(spark):
    frame = spark.range(10).select(F.lit("a").alias(FILE_COL), F.col("id").alias(ROW_COL))
    assert found(frame.where("id < 0")) == {}


def bucket_table(rows: list[tuple[str, int, list[int]]]) -> pa.Table:
    """A bitmap_frame result built by hand: (file, bucket from 1, bits set)."""
    bits = []
    for _, _, set_bits in rows:
        dense = np.zeros(B, np.uint8)
        dense[set_bits] = 1
        bits.append(np.packbits(dense, bitorder="little").tobytes())
    return pa.table(
        {
            FILE_COL: [r[0] for r in rows],
            "_lh_bucket": pa.array([r[1] for r in rows], pa.int64()),
            "_lh_bits": pa.array(bits, pa.binary()),
        }
    )


def test_bitmaps_of_decodes_files_alternating_across_chunks():
    # 150 rows alternating between two files: the owner changes on every row and
    # rows of one file fall in several decode chunks
    rows = []
    want = {"x": BitMap(), "y": BitMap()}
    for i in range(150):
        name = "xy"[i % 2]
        bucket = i // 2 + 1
        set_bits = [0, i % B, B - 1]
        rows.append((name, bucket, set_bits))
        want[name].update((bucket - 1) * B + b for b in set_bits)
    got = P.bitmaps_of(bucket_table(rows), {"x": "p/x", "y": "p/y"})
    assert got == {"p/x": want["x"], "p/y": want["y"]}


def test_bitmaps_of_skips_empty_bitmaps_and_refuses_a_wrong_size():
    got = P.bitmaps_of(bucket_table([("x", 1, []), ("y", 2, [5])]), {"x": "p/x", "y": "p/y"})
    assert got == {"p/y": BitMap([B + 5])}
    assert P.bitmaps_of(bucket_table([]), {}) == {}
    bad = pa.table(
        {FILE_COL: ["x"], "_lh_bucket": pa.array([1], pa.int64()), "_lh_bits": [b"\x01"]}
    )
    with pytest.raises(RuntimeError, match="unexpected size"):
        P.bitmaps_of(bad, {"x": "p/x"})


# -- lhs.delete end to end ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lh(tmp_path_factory):
    h = lakehouse.open(str(tmp_path_factory.mktemp("pos") / "lh"), kv_options={"fsync": False})
    with h.begin() as txn:
        txn.create_namespace("s")
    yield h
    h.close()


def make_table(spark, lh, name: str, n: int, files: int) -> pa.Table:
    with lh.begin() as txn:
        txn.create_table(
            name,
            pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())]),
            # no automatic rewrite of a heavily deleted file behind the checks' backs
            {"inline.max_rows": "0", "compaction.auto": "false"},
        )
    df = spark.range(0, n, numPartitions=files).select(
        "id", F.concat(F.lit("v"), F.col("id").cast("string")).alias("v")
    )
    lhs.write(lh, df, name)
    assert len(lh.list_data_files(name)) == files
    return lh.read(name)


def check(lh, name: str, before: pa.Table, deleted_mask: np.ndarray, n_deleted: int) -> None:
    ids = before.column("id").to_numpy()
    expect = np.sort(ids[~deleted_mask])
    assert n_deleted == int(deleted_mask.sum())
    after = lh.read(name)
    got = np.sort(after.column("id").to_numpy())
    assert np.array_equal(got, expect)
    # the other columns stayed with their rows
    assert pc.all(
        pc.equal(
            after.column("v"),
            pc.binary_join_element_wise("v", pc.cast(after.column("id"), pa.string()), ""),
        )
    ).as_py()
    assert lh.table_stats(name).deleted_rows == int(deleted_mask.sum())


def test_delete_scattered_rows_across_files(spark, lh):
    before = make_table(spark, lh, "s.scattered", 200_000, 5)
    n = lhs.delete(lh, spark, "s.scattered", "id % 7 = 3 OR id = 0 OR id = 199999")
    ids = before.column("id").to_numpy()
    check(lh, "s.scattered", before, (ids % 7 == 3) | (ids == 0) | (ids == 199_999), n)


def test_delete_contiguous_rows_across_a_file_boundary_and_buckets(spark, lh):
    before = make_table(spark, lh, "s.contiguous", 200_000, 4)
    # files hold 50,000 rows each: the range ends inside the second file,
    # crossing its first bucket edge (32,768) and the file edge at 50,000
    n = lhs.delete(lh, spark, "s.contiguous", "id BETWEEN 32767 AND 90000")
    ids = before.column("id").to_numpy()
    check(lh, "s.contiguous", before, (ids >= 32_767) & (ids <= 90_000), n)
    # a second delete adds to the vectors: only rows not yet deleted count
    n2 = lhs.delete(lh, spark, "s.contiguous", "id BETWEEN 89990 AND 100000")
    assert n2 == 100_000 - 90_000
    check(lh, "s.contiguous", before, (ids >= 32_767) & (ids <= 100_000), n + n2)


def test_delete_matching_nothing_changes_nothing(spark, lh):
    before = make_table(spark, lh, "s.nothing", 1_000, 2)
    v = lh.version
    assert lhs.delete(lh, spark, "s.nothing", "id < 0") == 0
    check(lh, "s.nothing", before, np.zeros(before.num_rows, bool), 0)
    assert lh.version >= v
