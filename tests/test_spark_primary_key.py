"""lakehouse.spark on tables with a primary key: merges on the key go through the
key index (the target is never scanned), duplicates are refused as in Python.

Every result is checked against the lakehouse's own Python read. One
SparkSession for the run (tests/spark_fixtures.py).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

import lakehouse.spark as lhs

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

T = "shop.items"
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("qty", pa.int32())]
)


def rows(ids: list[int], name: str = "n") -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"{name}{i}" for i in ids],
            "qty": pa.array([i % 7 for i in ids], pa.int32()),
        },
        schema=SCHEMA,
    )


@pytest.fixture(params=["inline", "parquet"])
def lh(request: pytest.FixtureRequest, tmp_path):
    """Rows 0..299 in the table (inlined, or in Parquet files), keyed by id."""
    props = {"compaction.auto": "false"}
    if request.param == "parquet":
        props["inline.max_rows"] = "0"
    h = lakehouse.open(str(tmp_path / "lh"), kv_options={"fsync": False})
    with h.begin() as txn:
        txn.create_namespace("shop")
        txn.create_table(T, SCHEMA, props, primary_key=["id"])
    h.append(T, rows(list(range(0, 150))))
    h.append(T, rows(list(range(150, 300))))
    yield h
    h.close()


def by_id(t: pa.Table) -> dict[int, tuple]:
    d = t.to_pydict()
    return {i: (n, q) for i, n, q in zip(d["id"], d["name"], d["qty"], strict=True)}


def test_merge_on_the_primary_key_without_on(spark, lh) -> None:
    src = rows([5, 6, 299, 400, 401], name="new")
    want = by_id(lh.read(T))
    want.update(by_id(src))
    res = lhs.merge(lh, spark.createDataFrame(src.to_pandas()), T)
    assert (res.updated, res.inserted, res.deleted) == (3, 2, 0)
    got = lh.read(T)
    assert got.num_rows == len(want) and by_id(got) == want


def test_merge_on_the_key_does_not_read_the_target(spark, lh, monkeypatch) -> None:
    """The key path never builds a scan of the target table."""
    from lakehouse.spark import ops

    def no_scan(*_a, **_k):
        raise AssertionError("the target was scanned")

    monkeypatch.setattr(ops.Table, "frame", no_scan)
    src = rows([1, 2, 1000])
    res = lhs.merge(lh, spark.createDataFrame(src.to_pandas()), T, on="id")
    assert (res.updated, res.inserted) == (2, 1)
    assert by_id(lh.read(T, where="id IN (1, 2, 1000)")) == by_id(src)


def test_merge_with_a_partial_source_keeps_target_values(spark, lh) -> None:
    src = pa.table({"id": pa.array([7, 500], pa.int64()), "qty": pa.array([99, 1], pa.int32())})
    lhs.merge(lh, spark.createDataFrame(src.to_pandas()), T)
    got = by_id(lh.read(T, where="id IN (7, 500)"))
    assert got == {7: ("n7", 99), 500: (None, 1)}


def test_merge_source_with_duplicate_or_null_keys_is_refused(spark, lh) -> None:
    before = lh.version
    dup = rows([3, 3, 900])
    with pytest.raises(ValueError, match="duplicate keys"):
        lhs.merge(lh, spark.createDataFrame(dup.to_pandas()), T)
    nulls = spark.createDataFrame([(None, "a"), (5, "b")], "id bigint, name string")
    with pytest.raises(ValueError, match="null"):  # a key column that may not be null
        lhs.merge(lh, nulls, T)
    assert lh.version == before


def test_write_of_an_existing_key_is_refused(spark, lh) -> None:
    before = lh.version
    with pytest.raises(lakehouse.DuplicateKey, match="id=10"):
        lhs.write(lh, spark.createDataFrame(rows([10, 1000]).to_pandas()), T)
    assert lh.version == before and lh.read(T).num_rows == 300
    lhs.write(lh, spark.createDataFrame(rows([1000, 1001]).to_pandas()), T)
    assert lh.read(T).num_rows == 302


def test_merge_then_python_keeps_keys_unique(spark, lh) -> None:
    lhs.merge(lh, spark.createDataFrame(rows([1, 2, 3, 700]).to_pandas()), T)
    with pytest.raises(lakehouse.DuplicateKey):
        lh.append(T, rows([700]))
    lh.merge(T, rows([2, 701]))
    ids = lh.read(T).column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 302
