"""lakehouse.spark.merge: the driver path (a source of at most MERGE_DRIVER_ROWS
rows, checked and written by the driver after one Spark job matches it with
the target) and the Spark path (larger sources) give the same tables.

Each case runs the same merge on identical lakehouses: once by the driver path,
once by the Spark path (``MERGE_DRIVER_ROWS`` patched to 0), and once by the
lakehouse's own Python ``txn.merge``, the reference. The tables hold rows in
Parquet files and inlined rows, with deleted rows of both. One SparkSession for
the run (tests/spark_fixtures.py).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakehouse
from lakehouse import Isolation

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

import lakehouse.spark as lhs
from lakehouse.spark import ops

# the module (lakehouse.spark.merge is also the name of its function)
merge_mod = importlib.import_module("lakehouse.spark.merge")

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

T = "s.t"
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("qty", pa.int32()),
        ("grp", pa.string()),
    ]
)
PROPS = {"inline.max_rows": "50", "compaction.auto": "false"}
PATHS = ("driver", "spark", "python")


def rows(ids: Any, name: str = "n", schema: pa.Schema = SCHEMA) -> pa.Table:
    ids = list(ids)
    cols = {
        "id": pa.array(ids, pa.int64()),
        "name": [f"{name}{i}" for i in ids],
        "qty": pa.array([i % 7 for i in ids], pa.int32()),
        "grp": [f"g{i % 3}" for i in ids],
    }
    return pa.table({n: cols[n] for n in schema.names}, schema=schema)


def make(root: Path, *, partition_by: list[str] | None = None, schema: pa.Schema = SCHEMA) -> Any:
    """Rows 0..299 in Parquet files, 300..329 inlined; 5 (file) and 310 (inline) deleted."""
    h = lakehouse.open(str(root), kv_options={"fsync": False})
    with h.begin() as txn:
        txn.create_namespace("s")
        txn.create_table(T, schema, PROPS, partition_by=partition_by)
    h.append(T, rows(range(0, 300), schema=schema))
    h.append(T, rows(range(300, 330), schema=schema))
    h.delete(T, "id IN (5, 310)")
    return h


def sorted_rows(t: pa.Table) -> list[dict[str, Any]]:
    return sorted(t.to_pylist(), key=lambda r: tuple(str(r[k]) for k in sorted(r)))


def run(spark, lh, how: str, src: pa.Table, monkeypatch, **kw: Any) -> Any:
    """Merge ``src`` into ``lh``'s table by the path ``how``."""
    kw.setdefault("on", "id")
    if how == "python":
        return lh.merge(T, src, **kw)
    with monkeypatch.context() as m:
        if how == "spark":
            m.setattr(merge_mod, "MERGE_DRIVER_ROWS", 0)
        return lhs.merge(lh, spark.createDataFrame(src), T, **kw)


def outcome(lh: Any, res: Any) -> tuple[Any, ...]:
    """What a merge left: its counts, the table's rows, the change feed of its version."""
    ch = lh.changes(T, lh.version, lh.version)
    return (
        (res.inserted, res.updated, res.deleted),
        sorted_rows(lh.read(T)),
        sorted_rows(
            ch.drop_columns(
                [c for c in ch.column_names if c.startswith("_") and c != "_change_type"]
            )
        ),
    )


def all_paths(spark, tmp_path, monkeypatch, src, *, make_kw=None, **kw) -> dict[str, Any]:
    out = {}
    for how in PATHS:
        lh = make(tmp_path / how, **(make_kw or {}))
        try:
            out[how] = outcome(lh, run(spark, lh, how, src, monkeypatch, **kw))
        finally:
            lh.close()
    return out


# 3, 150 (files), 305, 320 (inline) matched; 5, 310 (deleted) and 1000, 1001 new
SOURCE = [3, 150, 305, 320, 5, 310, 1000, 1001]


@pytest.mark.parametrize("when_matched", ["update", "delete", "ignore"])
@pytest.mark.parametrize("when_not_matched", ["insert", "ignore"])
def test_driver_and_spark_paths_give_the_same_table(
    spark, tmp_path, monkeypatch, when_matched, when_not_matched
):
    got = all_paths(
        spark,
        tmp_path,
        monkeypatch,
        rows(SOURCE, name="new"),
        when_matched=when_matched,
        when_not_matched=when_not_matched,
    )
    assert got["driver"] == got["spark"] == got["python"]
    counts = got["driver"][0]
    assert counts == (
        4 if when_not_matched == "insert" else 0,
        4 if when_matched == "update" else 0,
        4 if when_matched == "delete" else 0,
    )


def test_string_keys_of_two_columns_and_an_empty_source(spark, tmp_path, monkeypatch):
    src = rows(SOURCE, name="n").set_column(2, "qty", pa.array([99] * len(SOURCE), pa.int32()))
    got = all_paths(spark, tmp_path, monkeypatch, src, on=["name", "grp"])
    assert got["driver"] == got["spark"] == got["python"]
    assert got["driver"][0] == (4, 4, 0)
    empty = rows([]).select(["id", "name"])
    got = all_paths(spark, tmp_path / "empty", monkeypatch, empty)
    assert got["driver"] == got["spark"] == got["python"]
    assert got["driver"][0] == (0, 0, 0)


def test_kept_columns_and_partitioned_target(spark, tmp_path, monkeypatch):
    """A source without qty: updated rows keep the target's qty, inserted get null;
    the target is partitioned by grp (matched rows in every partition)."""
    src = rows(SOURCE, name="new").drop_columns(["qty"])
    got = all_paths(spark, tmp_path, monkeypatch, src, make_kw={"partition_by": ["grp"]})
    assert got["driver"] == got["spark"] == got["python"]
    table = {r["id"]: r for r in got["driver"][1]}
    assert table[150]["qty"] == 150 % 7 and table[150]["name"] == "new150"
    assert table[1000]["qty"] is None and table[320]["qty"] == 320 % 7


def test_change_feed_reports_update_images(spark, tmp_path, monkeypatch):
    """(The cases above compare both paths' change feeds with Python's.)"""
    lh = make(tmp_path / "lh")
    _, _, got = outcome(lh, run(spark, lh, "driver", rows([3, 305, 1000], name="new"), monkeypatch))
    lh.close()
    feed = sorted((r["_change_type"], r["id"], r["name"]) for r in got)
    assert feed == [
        ("insert", 1000, "new1000"),
        ("update_postimage", 3, "new3"),
        ("update_postimage", 305, "new305"),
        ("update_preimage", 3, "n3"),
        ("update_preimage", 305, "n305"),
    ]


def test_a_small_source_runs_one_scan_and_no_spark_write(spark, tmp_path, monkeypatch):
    lh = make(tmp_path / "lh")
    inlined = lh.table_stats(T).inlined_rows
    scans = []
    frame = ops.Table.frame

    def counted(self, *a, **k):
        scans.append(k.get("where"))
        return frame(self, *a, **k)

    def no_write(*_a, **_k):
        raise AssertionError("a Spark write job ran")

    monkeypatch.setattr(ops.Table, "frame", counted)
    monkeypatch.setattr(ops.Table, "write", no_write)
    res = lhs.merge(lh, spark.createDataFrame(rows([3, 150, 1000], name="new")), T, on="id")
    assert (res.inserted, res.updated) == (1, 2)
    assert scans == ["id >= 3 AND id <= 1000"]  # one scan, pruned by the keys' bounds
    assert lh.read(T, where="id = 1000").num_rows == 1
    # the new versions of 3 and 150 and the new 1000: inlined, no Parquet file written
    assert lh.table_stats(T).inlined_rows == inlined + 3
    lh.close()


@pytest.mark.parametrize("limit", [7, 8])
def test_a_source_at_and_just_above_the_driver_limit(spark, tmp_path, monkeypatch, limit):
    """8 source rows: at the limit (8) the driver path, above it (7) the Spark path."""
    calls = []
    on_driver = merge_mod._merge_on_driver

    def spy(*a, **k):
        calls.append(1)
        return on_driver(*a, **k)

    monkeypatch.setattr(merge_mod, "MERGE_DRIVER_ROWS", limit)
    monkeypatch.setattr(merge_mod, "_merge_on_driver", spy)
    lh = make(tmp_path / "lh")
    want = make(tmp_path / "want")
    res = lhs.merge(lh, spark.createDataFrame(rows(SOURCE, name="new")), T, on="id")
    ref = want.merge(T, rows(SOURCE, name="new"), on="id")
    assert len(calls) == (1 if limit >= len(SOURCE) else 0)
    assert outcome(lh, res) == outcome(want, ref)
    lh.close()
    want.close()


@pytest.mark.parametrize("how", ["driver", "spark"])
def test_bad_sources_are_refused_alike(spark, tmp_path, monkeypatch, how):
    lh = make(tmp_path / "lh")
    v = lh.version
    dup = rows([3, 3, 900])
    with pytest.raises(ValueError, match=r"duplicate keys on \['id'\] \(e.g. \[3\]\)"):
        run(spark, lh, how, dup, monkeypatch)
    with pytest.raises(ValueError, match="null keys"):
        run(spark, lh, how, pa.table({"name": pa.array([None, "n4"])}), monkeypatch, on="name")
    # a source key matching two rows of the target
    lh.append(T, rows([7]))
    with pytest.raises(ValueError, match="unique target keys"):
        run(spark, lh, how, rows([7, 2000]), monkeypatch)
    assert lh.version == v + 1
    lh.close()


@pytest.mark.parametrize("how", ["driver", "spark"])
def test_a_missing_not_nullable_column_refuses_inserts(spark, tmp_path, monkeypatch, how):
    schema = SCHEMA.set(2, pa.field("qty", pa.int32(), nullable=False))
    lh = make(tmp_path / "lh", schema=schema)
    v = lh.version
    src = rows([3, 1000], schema=schema).drop_columns(["qty"])
    with pytest.raises(ValueError, match=r"lacks column 'qty'.*1 of its rows"):
        run(spark, lh, how, src, monkeypatch)
    res = run(spark, lh, how, src, monkeypatch, when_not_matched="ignore")
    assert (res.updated, res.inserted) == (1, 0)
    assert lh.read(T, where="id = 3").to_pylist()[0]["qty"] == 3
    assert lh.version == v + 1
    lh.close()


@pytest.mark.parametrize("how", ["driver", "spark"])
def test_merge_joins_the_callers_transaction(spark, tmp_path, monkeypatch, how):
    lh = make(tmp_path / "lh")
    v = lh.version
    with lh.begin() as txn:
        res = run(spark, lh, how, rows([3, 1000], name="new"), monkeypatch, txn=txn)
        txn.append(T, rows([2000]))
        assert lh.version == v  # nothing visible before the commit
    assert (res.updated, res.inserted) == (1, 1)
    assert lh.version == v + 1
    got = lh.read(T, where="id IN (3, 1000, 2000)").sort_by("id").column("name").to_pylist()
    assert got == ["new3", "new1000", "n2000"]
    txn = lh.begin()
    run(spark, lh, how, rows([4], name="gone"), monkeypatch, txn=txn)
    txn.rollback()
    assert lh.version == v + 1 and lh.read(T, where="id = 4").column("name").to_pylist() == ["n4"]
    lh.close()


@pytest.mark.parametrize("how", ["driver", "spark"])
def test_concurrent_inserts_of_a_key_conflict(spark, tmp_path, monkeypatch, how):
    lh = make(tmp_path / "lh")
    a, b = lh.begin(Isolation.SNAPSHOT), lh.begin(Isolation.SNAPSHOT)
    run(spark, lh, how, rows([1000, 1001]), monkeypatch, txn=a)
    run(spark, lh, how, rows([1001, 1002]), monkeypatch, txn=b)
    a.commit()
    with pytest.raises(lakehouse.CommitConflict):
        b.commit()
    assert pc.sum(pc.greater_equal(lh.read(T).column("id"), 1000)).as_py() == 2
    lh.close()


def test_primary_key_merge_of_a_small_source_writes_on_the_driver(spark, tmp_path, monkeypatch):
    """On the primary key, driver and Spark paths agree with Python (kept columns too)."""
    out = {}
    for how in PATHS:
        h = lakehouse.open(str(tmp_path / how), kv_options={"fsync": False})
        with h.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, SCHEMA, PROPS, primary_key=["id"])
        h.append(T, rows(range(0, 300)))
        h.append(T, rows(range(300, 330)))
        src = rows([3, 305, 1000], name="new").drop_columns(["qty"])
        with monkeypatch.context() as m:
            if how == "driver":
                m.setattr(ops.Table, "write", lambda *_a, **_k: pytest.fail("a Spark write"))
            res = run(spark, h, how, src, monkeypatch, on=None)
        out[how] = outcome(h, res)
        h.close()
    assert out["driver"] == out["spark"] == out["python"]
    assert out["driver"][0] == (1, 2, 0)
