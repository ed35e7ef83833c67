"""Table data through the public API (API.md "Table data"), on memory, local disk and S3."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from parquet_files import PARQUET, parquet_only

import lakehouse

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("status", pa.string()),
        ("total", pa.float64()),
    ]
)


def rows(n: int, start: int = 0, status: str = "open") -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {"id": ids, "status": [status] * n, "total": [float(i) for i in ids]}, schema=SCHEMA
    )


def ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())


@pytest.fixture(params=["memory", "local", pytest.param("s3", marks=pytest.mark.s3)])
def lh(request, tmp_path):
    if request.param == "memory":
        h = lakehouse.open(f"memory://data-{uuid.uuid4().hex}")
    elif request.param == "local":
        h = lakehouse.open(str(tmp_path / "lh"))
    else:
        url, opts = request.getfixturevalue("s3_url")
        h = lakehouse.open(url, storage_options=opts)
    with h.begin() as txn:
        txn.create_namespace("s")
        txn.create_table("s.orders", SCHEMA)
    yield h
    h.close()


@pytest.fixture
def mem():
    h = lakehouse.open(f"memory://data-{uuid.uuid4().hex}")
    with h.begin() as txn:
        txn.create_namespace("s")
        txn.create_table("s.orders", SCHEMA)
    yield h
    h.close()


def data_files(h: lakehouse.Lakehouse) -> set[str]:
    return {n for n in h.data_store.list("") if n.endswith(".parquet")}


# -- the operations, on every backend ----------------------------------------------------
def test_append_read_and_time_travel(lh):
    with lh.begin() as txn:
        assert txn.append("s.orders", rows(10)) == 10
        assert txn.read("s.orders").num_rows == 10  # own writes
        assert lh.read("s.orders").num_rows == 0  # not yet committed
    v1 = lh.version
    with lh.begin() as txn:
        txn.append("s.orders", rows(5, 10).to_batches()[0])
    assert ids(lh.read("s.orders")) == list(range(15))
    assert lh.at_version(v1).read("s.orders").num_rows == 10
    assert lh.at_version(v1 - 1).read("s.orders").num_rows == 0
    stats = lh.table_stats("s.orders")
    assert (stats.rows, stats.files, stats.deleted_rows) == (15, 2, 0)
    assert stats.bytes == sum(f.bytes for f in lh.list_data_files("s.orders"))


def test_delete_update_with_deletion_vectors(lh):
    with lh.begin() as txn:
        txn.append("s.orders", rows(100))
    files_before = data_files(lh)
    with lh.begin() as txn:
        assert txn.delete("s.orders", "id < 10 OR status = 'none'") == 10
    assert data_files(lh) == files_before  # no file rewritten
    assert lh.table_stats("s.orders").deleted_rows == 10
    with lh.begin() as txn:
        n = txn.update(
            "s.orders", pc.field("id") >= 95, {"status": "'shipped'", "total": "total * 2"}
        )
        assert n == 5
    got = lh.read("s.orders", where="status = 'shipped'")
    assert sorted(got.column("total").to_pylist()) == [190.0, 192.0, 194.0, 196.0, 198.0]
    assert lh.read("s.orders").num_rows == 90
    f = lh.list_data_files("s.orders")
    assert sum(x.deleted_rows for x in f) == 15 and sum(x.live_rows for x in f) == 90


def test_overwrite_all_and_where(lh):
    with lh.begin() as txn:
        txn.append("s.orders", rows(10))
        txn.append("s.orders", rows(10, 10, status="done"))
    with lh.begin() as txn:
        assert txn.overwrite("s.orders", rows(3, 100, status="done"), where="status = 'done'") == 3
    got = lh.read("s.orders")
    assert ids(got) == [*range(10), 100, 101, 102]
    with lh.begin() as txn:
        txn.overwrite("s.orders", rows(2, 500))
    assert ids(lh.read("s.orders")) == [500, 501]


def test_merge_upsert(lh):
    with lh.begin() as txn:
        txn.append("s.orders", rows(5))
    src = pa.table({"id": [3, 4, 7], "status": ["u", "u", "new"], "total": [0.5, 0.5, 7.0]})
    with lh.begin() as txn:
        r = txn.merge("s.orders", src, on="id")
    assert (r.inserted, r.updated, r.deleted) == (1, 2, 0)
    got = {x["id"]: x["status"] for x in lh.read("s.orders").to_pylist()}
    assert got == {0: "open", 1: "open", 2: "open", 3: "u", 4: "u", 7: "new"}
    with lh.begin() as txn:
        r = txn.merge(
            "s.orders",
            pa.table({"id": [0, 99]}),
            on=["id"],
            when_matched="delete",
            when_not_matched="ignore",
        )
    assert (r.inserted, r.updated, r.deleted) == (0, 0, 1)
    assert ids(lh.read("s.orders")) == [1, 2, 3, 4, 7]


def test_merge_refuses_its_keys_with_a_typed_error_and_writes_nothing(lh):
    with lh.begin() as txn:
        txn.append("s.orders", pa.concat_tables([rows(3), rows(1)]))
    v = lh.version
    cases = [
        (pa.table({"id": [5, 5], "status": ["a", "b"]}), "duplicate keys"),
        (pa.table({"id": [0], "status": ["a"]}), "matches two rows"),  # id 0 is there twice
    ]
    for src, why in cases:
        with pytest.raises(lakehouse.MergeKeyError, match=why) as exc, lh.begin() as txn:
            txn.merge("s.orders", src, on="id")
        assert isinstance(exc.value, ValueError)
        assert lh.version == v


def test_compact_keeps_rows_and_removes_deleted(lh):
    for i in range(4):
        with lh.begin() as txn:
            txn.append("s.orders", rows(10, i * 10))
    with lh.begin() as txn:
        txn.delete("s.orders", "id % 3 = 0")
    before = ids(lh.read("s.orders"))
    with lh.begin() as txn:
        r = txn.compact("s.orders")
    assert r.files_removed == 4 and r.files_added == 1 and r.rows == len(before)
    assert ids(lh.read("s.orders")) == before
    st = lh.table_stats("s.orders")
    assert (st.files, st.deleted_rows) == (1, 0)
    assert ids(lh.at_version(lh.version - 1).read("s.orders")) == before


def test_restore_and_clone(lh):
    with lh.begin() as txn:
        txn.append("s.orders", rows(5))
    v = lh.version
    with lh.begin() as txn:
        txn.delete("s.orders", "id > 1")
        txn.alter_table("s.orders", set_properties={"k": "v"})
    with lh.begin() as txn:
        txn.clone_table("s.orders", "s.copy")
        txn.restore_table("s.orders", v)
    assert ids(lh.read("s.orders")) == list(range(5))
    assert lh.describe_table("s.orders").properties == {}
    assert ids(lh.read("s.copy")) == [0, 1]
    copy_paths = {f.path for f in lh.list_data_files("s.copy")}
    assert copy_paths <= {f.path for f in lh.list_data_files("s.orders")}  # shared, no copy


def test_schema_evolution_reads_old_files_through_ids(lh):
    narrow = pa.schema(
        [pa.field("k", pa.int32(), nullable=False), ("x", pa.float32()), ("y", pa.string())]
    )
    with lh.begin() as txn:
        txn.create_table("s.ev", narrow)
        txn.append("s.ev", pa.table({"k": [1, 2], "x": [1.5, 2.5], "y": ["a", "b"]}, schema=narrow))
    files = data_files(lh)
    wide = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("x", pa.float64()), ("z", pa.bool_())]
    )
    with lh.begin() as txn:
        txn.alter_table("s.ev", schema=wide)  # widen k and x, drop y, add z
    with lh.begin() as txn:
        txn.alter_table("s.ev", rename_columns={"x": "amount"})
        txn.append("s.ev", pa.table({"k": [3], "amount": [3.5], "z": [True]}))
    got = lh.read("s.ev").sort_by("k")
    assert got.schema.field("k").type == pa.int64() and got.column_names == ["k", "amount", "z"]
    assert got.to_pylist() == [
        {"k": 1, "amount": 1.5, "z": None},
        {"k": 2, "amount": 2.5, "z": None},
        {"k": 3, "amount": 3.5, "z": True},
    ]
    assert files <= data_files(lh)  # the old file was not rewritten
    assert lh.read("s.ev", where="amount > 2").num_rows == 2
    with lh.begin() as txn:  # a new column named like a dropped one gets a new id
        cur = txn.describe_table("s.ev").schema
        txn.alter_table("s.ev", schema=cur.append(pa.field("y", pa.string())))
    assert lh.read("s.ev").column("y").null_count == 3
    d = lh.describe_table("s.ev")
    assert {c.name: c.id for c in d.columns}["y"] == 5


def test_scan_batches_streams_and_projects(lh):
    for i in range(3):
        with lh.begin() as txn:
            txn.append("s.orders", rows(4, i * 4))
    reader = lh.scan_batches("s.orders", columns=["id"], where="id >= 2")
    assert isinstance(reader, pa.RecordBatchReader)
    batches = list(reader)
    assert len(batches) == 3 and reader.schema.names == ["id"]
    assert sorted(x for b in batches for x in b.column(0).to_pylist()) == list(range(2, 12))


def test_stats_prune_files(lh):
    for i in range(5):
        with lh.begin() as txn:
            txn.append("s.orders", rows(10, i * 10))
    f = lh.list_data_files("s.orders")[0]
    assert f.stats["id"] == lakehouse.ColumnStats(0, 9, 0)
    from lakehouse.data import scan

    with lh.at_version(lh.version) as v:
        d = v.describe_table("s.orders")
        files = v.file_states("s.orders")
        kept = scan.pruned(d, files, scan.predicate(d, "id BETWEEN 12 AND 18"))
    assert len(kept) == 1


# -- lakehouse-level features --------------------------------------------------------------
def test_changes_feed(mem):
    with mem.begin() as txn:
        txn.append("s.orders", rows(3))
    start = mem.version
    with mem.begin() as txn:
        txn.update("s.orders", "id = 1", {"status": "'x'"})
    with mem.begin() as txn:
        txn.delete("s.orders", "id = 2")
    ch = mem.changes("s.orders", start).to_pylist()
    assert {(r["id"], r["status"], r["_change_type"], r["_version"]) for r in ch} == {
        (0, "open", "insert", start),
        (1, "open", "insert", start),
        (2, "open", "insert", start),
        (1, "x", "update_postimage", start + 1),  # an update: one pre- and one post-image
        (1, "open", "update_preimage", start + 1),
        (2, "open", "delete", start + 2),
    }


def test_idempotent_writes(mem):
    parquet_only(mem, "s.orders")
    for _ in range(3):
        with mem.begin(app_id="nightly", app_version=42) as txn:
            txn.append("s.orders", rows(2))
    assert mem.read("s.orders").num_rows == 2
    assert mem.app_version("nightly") == 42
    assert mem.app_version("other") is None
    with mem.begin(app_id="nightly", app_version=41) as txn:
        txn.append("s.orders", rows(2))
    assert txn.skipped and mem.read("s.orders").num_rows == 2
    assert len(data_files(mem)) == 1  # the skipped writes' files were deleted


def test_one_commit_changes_two_tables_and_definitions(mem):
    with mem.begin() as txn:
        txn.create_table("s.agg", pa.schema([("n", pa.int64())]))
        txn.append("s.orders", rows(4))
        txn.append("s.agg", pa.table({"n": [4]}))
        txn.alter_table("s.orders", set_properties={"loaded": "yes"})
    v = mem.version
    rec = mem.history()[0]
    assert {c.table for c in rec.data} == {"s.orders", "s.agg"}
    assert mem.at_version(v - 1).list_tables("s") == ["orders"]
    assert mem.read("s.agg").to_pylist() == [{"n": 4}]


def test_rollback_export_expire_cover_data(tmp_path):
    lh = lakehouse.open(str(tmp_path / "a"))
    with lh.begin() as txn:
        txn.create_namespace("s")
        txn.create_table("s.orders", SCHEMA, PARQUET)
        txn.append("s.orders", rows(10))
    good = lh.version
    with lh.begin() as txn:
        txn.overwrite("s.orders", rows(1, 99))
    lh.rollback(good)
    assert ids(lh.read("s.orders")) == list(range(10))
    summary = lh.export(str(tmp_path / "b"))
    assert summary["files_copied"] == 1
    with lakehouse.open(str(tmp_path / "b")) as b:
        assert ids(b.read("s.orders")) == list(range(10))
    before = data_files(lh)
    lh.expire_versions(keep_last=1, grace=dt.timedelta(0))
    after = data_files(lh)
    assert len(after) == 1 and after < before  # the overwrite's file went with its version
    assert ids(lh.read("s.orders")) == list(range(10))
    lh.close()


def test_abort_deletes_written_files_and_orphans_are_removed(mem):
    parquet_only(mem, "s.orders")
    txn = mem.begin()
    txn.append("s.orders", rows(3))
    assert len(data_files(mem)) == 1
    txn.rollback()
    assert data_files(mem) == set()
    with pytest.raises(RuntimeError), mem.begin() as txn:
        txn.append("s.orders", rows(3))
        raise RuntimeError("the job failed")
    assert data_files(mem) == set()
    with mem.begin() as txn:
        txn.append("s.orders", rows(3))
    live = data_files(mem)
    mem.data_store.put_if_absent("x/0000000000001-00000000000000ff.parquet", b"crashed writer")
    running = mem.begin()
    running.append("s.orders", rows(1, 50))
    removed = mem.remove_orphan_files(older_than=dt.timedelta(0))
    assert removed == ["x/0000000000001-00000000000000ff.parquet"]
    running.commit()  # its file was in flight, so it was kept
    assert live < data_files(mem) and mem.read("s.orders").num_rows == 4


def test_persisted_after_reopen(tmp_path):
    path = str(tmp_path / "p")
    with lakehouse.open(path) as h, h.begin() as txn:
        txn.create_namespace("s")
        txn.create_table("s.orders", SCHEMA)
        txn.append("s.orders", rows(7))
        txn.delete("s.orders", "id = 3")
    with lakehouse.open(path) as h:
        assert ids(h.read("s.orders")) == [0, 1, 2, 4, 5, 6]


def test_duckdb_and_polars_read_the_arrow_result(mem):
    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    with mem.begin() as txn:
        txn.append("s.orders", rows(10))
    orders = mem.read("s.orders")
    assert duckdb.sql("SELECT sum(total) FROM orders WHERE id < 4").fetchall()[0][0] == 6.0
    assert pl.from_arrow(orders).filter(pl.col("id") > 7).height == 2
    reader = mem.scan_batches("s.orders")  # noqa: F841 (DuckDB finds it by name)
    assert duckdb.sql("SELECT count(*) FROM reader").fetchall()[0][0] == 10


def test_pandas_input_and_types(mem):
    pd = pytest.importorskip("pandas")
    sch = pa.schema(
        [("d", pa.decimal128(10, 2)), ("ts", pa.timestamp("us", tz="UTC")), ("n", pa.int32())]
    )
    with mem.begin() as txn:
        txn.create_table("s.typed", sch)
        txn.append("s.typed", pd.DataFrame({"n": [1, 2]}))  # missing nullable columns -> null
        txn.append(
            "s.typed",
            pa.table(
                {"d": [Decimal("1.50")], "ts": [dt.datetime(2024, 1, 2, tzinfo=dt.UTC)], "n": [3]}
            ),
        )
    assert mem.read("s.typed", where="ts > '2024-01-01 00:00:00'").column("n").to_pylist() == [3]
    assert mem.read("s.typed", where="d IS NULL").num_rows == 2


# -- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data, message",
    [
        (pa.table({"id": [1], "nope": [1]}), "nope"),
        (pa.table({"status": ["x"]}), "id"),
        (pa.table({"id": [1], "total": ["1.0"]}), "total"),
        (pa.table({"id": [2**40]}).cast(pa.schema([("id", pa.int64())])), None),
        (pa.table({"id": [None]}, schema=pa.schema([("id", pa.int64())])), "id"),
    ],
)
def test_bad_rows_raise_value_error_and_write_nothing(mem, data, message):
    if message is None:  # a fine row: the control case
        with mem.begin() as txn:
            txn.append("s.orders", data)
        return
    with pytest.raises(ValueError, match=message), mem.begin() as txn:
        txn.append("s.orders", data)
    assert data_files(mem) == set() and mem.read("s.orders").num_rows == 0


def test_unsafe_cast_names_column(mem):
    sch = pa.schema([("small", pa.int8())])
    with mem.begin() as txn:
        txn.create_table("s.small", sch)
    with pytest.raises(ValueError, match="small"), mem.begin() as txn:
        txn.append("s.small", pa.table({"small": [1000]}))


def test_bad_where_and_missing_table(mem):
    parquet_only(mem, "s.orders")
    with mem.begin() as txn:
        txn.append("s.orders", rows(3))
    for where, msg in [("id >", "id >"), ("nope = 1", "nope"), ("id + 1", "boolean")]:
        with pytest.raises(ValueError, match=msg):
            mem.read("s.orders", where=where)
    with pytest.raises(lakehouse.NotFound), mem.begin() as txn:
        txn.append("s.missing", rows(1))
    with pytest.raises(ValueError, match="do not match"), mem.begin() as txn:
        txn.overwrite("s.orders", rows(2, 0, status="x"), where="status = 'y'")
    with pytest.raises(ValueError, match="duplicate"), mem.begin() as txn:
        txn.merge("s.orders", pa.table({"id": [1, 1]}), on="id")
    with pytest.raises(ValueError, match="column"):
        mem.read("s.orders", columns=["nope"])
    with pytest.raises(ValueError, match="type"), mem.begin() as txn:
        txn.alter_table("s.orders", schema=pa.schema([("id", pa.string())]))
    assert data_files(mem) == {f.path for f in mem.list_data_files("s.orders")}
    assert mem.read("s.orders").num_rows == 3  # still usable


def test_files_a_transaction_drops_itself_are_deleted_after_commit(mem):
    parquet_only(mem, "s.orders")
    with mem.begin() as txn:
        txn.append("s.orders", rows(3))
        txn.overwrite("s.orders", rows(2, 10))  # drops the file appended just before
    assert ids(mem.read("s.orders")) == [10, 11]
    assert data_files(mem) == {f.path for f in mem.list_data_files("s.orders")}


def test_reads_keep_the_table_nullability(mem):
    with mem.begin() as txn:
        txn.append("s.orders", rows(2))
    assert not mem.read("s.orders").schema.field("id").nullable


def test_orphan_age_from_a_staging_directory_name():
    from lakehouse.data.files import created_ms

    assert created_ms("t/1795531808410-00ff.parquet") == 1795531808410
    assert created_ms("t/1795531808410-spark-ab/part-00000-x.snappy.parquet") == 1795531808410
    assert created_ms("t/part-00000.parquet") is None
    assert created_ms("t/1795531808410-00ff.json") is None


def test_delete_rows_as_an_update_conflicts_with_a_delete_of_the_same_row(mem):
    with mem.begin() as txn:
        txn.append("s.orders", rows(5))
    path = mem.list_data_files("s.orders")[0].path
    mine = mem.begin()
    mine.delete_rows("s.orders", {path: [2]}, op="update")
    with mem.begin() as theirs:
        theirs.delete("s.orders", "id = 2")
    with pytest.raises(lakehouse.RetryableConflict):
        mine.commit()
    plain = mem.begin()
    plain.delete_rows("s.orders", {path: [2, 3]})  # pure deletes: a union
    with mem.begin() as theirs:
        theirs.delete("s.orders", "id = 3")
    plain.commit()
    assert ids(mem.read("s.orders")) == [0, 1, 4]
