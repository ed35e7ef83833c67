"""Table layout: partition specs on tables, partitioned writes and reads, sort keys,
replace_partitions, and the key layout that makes planning cost what a read touches.

Pruning is checked black-box: a read that must not need a file succeeds with that
file deleted from storage (and a read that needs it fails)."""

from __future__ import annotations

import datetime as dt
import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from parquet_files import PARQUET

import lakehouse
from lakehouse import keys

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("country", pa.string()),
        ("amount", pa.float64()),
    ]
)
DAY0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def rows(ids, day: int | None = None, country: str = "US") -> pa.Table:
    ids = list(ids)
    ts = [DAY0 + dt.timedelta(days=day if day is not None else i % 5, hours=i % 24) for i in ids]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array(ts, SCHEMA.field("ts").type),
            "country": pa.array([country] * len(ids)),
            "amount": pa.array([float(i) for i in ids]),
        }
    )


@pytest.fixture
def lh(tmp_path):
    h = lakehouse.open(str(tmp_path / "lh"))
    with h.begin() as t:
        t.create_namespace("ns")
    yield h
    h.close()


def data_dir(lh) -> str:
    return lh.data_url.removeprefix("file://")


def data_path(lh, f) -> str:
    return os.path.join(data_dir(lh), f.path)


def create(lh, name="ns.t", **kw):
    """A table writing Parquet files (these tests look into the files; inlined
    rows are partitioned and sorted alike: tests/test_lakehouse_inline.py)."""
    with lh.begin() as t:
        t.create_table(name, SCHEMA, {"compaction.auto": "false", **PARQUET}, **kw)


# -- sort keys ---------------------------------------------------------------------------
def test_sort_keys_order_each_written_file(lh):
    create(lh, sort_keys=["country", "id"])
    data = pa.table(
        {
            "id": pa.array([5, 3, None, 1, 4], pa.int64()),
            "ts": pa.array([DAY0] * 5, SCHEMA.field("ts").type),
            "country": pa.array(["b", "a", "b", None, "a"]),
            "amount": pa.array([1.0] * 5),
        }
    )
    lh.append("ns.t", data)
    got = lh.read("ns.t")
    assert got.column("country").to_pylist() == [None, "a", "a", "b", "b"]
    assert got.column("id").to_pylist() == [1, 3, 4, None, 5]


def test_alter_sort_keys_applies_to_new_files(lh):
    create(lh)
    lh.append("ns.t", rows([3, 1, 2]))
    with lh.begin() as t:
        t.alter_table("ns.t", sort_keys=["id"])
    assert lh.describe_table("ns.t").sort_keys == ("id",)
    lh.append("ns.t", rows([9, 7, 8]))
    assert lh.read("ns.t").column("id").to_pylist() == [3, 1, 2, 7, 8, 9]


def test_alter_sort_keys_unknown_column(lh):
    create(lh)
    with pytest.raises(ValueError, match="nope"), lh.begin() as t:
        t.alter_table("ns.t", sort_keys=["nope"])
    assert lh.describe_table("ns.t").sort_keys == ()


# -- the plain-file-id bound (time travel skips later files) -------------------------------
def test_time_travel_reads_exact_rows_at_every_version(lh):
    create(lh)
    versions = []
    for i in range(12):
        lh.append("ns.t", rows(range(i * 10, i * 10 + 10)))
        versions.append((lh.version, (i + 1) * 10))
    lh.delete("ns.t", "id < 5")
    for v, n in versions:
        with lh.at_version(v) as view:
            assert sorted(view.read("ns.t").column("id").to_pylist()) == list(range(n))
    assert lh.read("ns.t").num_rows == 115


def test_bound_key_covers_plain_ids(lh):
    create(lh)
    lh.append("ns.t", rows([1]))
    lh.append("ns.t", rows([2]))
    raw = lh.kvstore.get(keys.file_bound_key("ns", "t"))
    assert raw is not None
    ids = [f.file_id for f in lh.list_data_files("ns.t")]
    assert keys.decode_file_bounds(raw) == (min(ids), max(ids))


def test_bounds_skip_files_compaction_removed(lh):
    create(lh)
    for i in range(5):
        lh.append("ns.t", rows([i]))
        if i == 0:
            first = lh.version
    old = {f.file_id for f in lh.list_data_files("ns.t")}
    with lh.begin() as t:
        t.compact("ns.t")
    (new,) = [f.file_id for f in lh.list_data_files("ns.t")]
    assert new not in old
    low, high = keys.decode_file_bounds(lh.kvstore.get(keys.file_bound_key("ns", "t")))
    assert low == new and high == new
    assert sorted(lh.read("ns.t").column("id").to_pylist()) == list(range(5))
    lh.delete("ns.t", "id = 0")  # a deletion vector of the compacted file is read too
    assert sorted(lh.read("ns.t").column("id").to_pylist()) == [1, 2, 3, 4]
    with lh.at_version(first) as view:  # the first append's file, below the bounds now
        assert view.read("ns.t").column("id").to_pylist() == [0]
    with lh.begin() as t:  # no plain file left
        t.remove_files("ns.t", [f.path for f in lh.list_data_files("ns.t")])
    assert lh.read("ns.t").num_rows == 0
    lh.append("ns.t", rows([9]))
    assert lh.read("ns.t").column("id").to_pylist() == [9]


def test_bound_first_written_over_files_with_larger_ids(lh):
    """A table whose state has no bound yet (written before it existed) gets one that
    covers the files it already has, whatever their ids."""
    create(lh)
    name = lh.describe_table("ns.t").table_id + "/zzz-adopted.parquet"
    import pyarrow.parquet as pq

    os.makedirs(os.path.dirname(os.path.join(data_dir(lh), name)), exist_ok=True)
    pq.write_table(rows([100]), os.path.join(data_dir(lh), name))
    with lh.begin() as t:
        t.add_files("ns.t", [name])
    # forget the bound, as in a lakehouse written before bounds existed
    lh.kvstore.delete(keys.file_bound_key("ns", "t"))
    lh.append("ns.t", rows([1]))
    raw = lh.kvstore.get(keys.file_bound_key("ns", "t"))
    assert keys.decode_file_bounds(raw)[1] == "zzz-adopted"
    assert sorted(lh.read("ns.t").column("id").to_pylist()) == [1, 100]


def test_rollback_and_reopen_keep_bounds_consistent(lh, tmp_path):
    create(lh)
    lh.append("ns.t", rows([1, 2]))
    v = lh.version
    lh.append("ns.t", rows([3]))
    lh.rollback(v)
    lh.append("ns.t", rows([4]))
    assert sorted(lh.read("ns.t").column("id").to_pylist()) == [1, 2, 4]
    lh.close()
    again = lakehouse.open(str(tmp_path / "lh"))
    try:
        assert sorted(again.read("ns.t").column("id").to_pylist()) == [1, 2, 4]
        with again.at_version(v) as view:
            assert sorted(view.read("ns.t").column("id").to_pylist()) == [1, 2]
    finally:
        again.close()


def test_plain_file_ranges():
    p = keys.table_state_prefix("ns", "t") + b"F/"
    assert keys.plain_file_ranges("ns", "t", b"F/", None) == [
        (p, p + b"p"),
        (p + b"q", keys.prefix_end(p)),
    ]
    assert keys.plain_file_ranges("ns", "t", b"F/", ("10", "17")) == [(p + b"10", p + b"17\x00")]
    assert keys.plain_file_ranges("ns", "t", b"F/", ("1", "zz")) == [
        (p + b"1", p + b"p"),
        (p + b"q", p + b"zz\x00"),
    ]
    assert keys.plain_file_ranges("ns", "t", b"F/", ("r", "zz")) == [(p + b"r", p + b"zz\x00")]
    assert keys.plain_file_ranges("ns", "t", b"F/", ("1", "pa")) == [(p + b"1", p + b"p")]
    assert keys.decode_file_bounds(keys.encode_file_bounds("a", "b")) == ("a", "b")


# -- partitioned tables ----------------------------------------------------------------------
def test_describe_partition_by(lh):
    create(lh, partition_by=["day(ts)", "bucket(4, id)", "country"])
    d = lh.describe_table("ns.t")
    assert d.partition_by == ("day(ts)", "bucket(4, id)", "country")
    create(lh, "ns.u")
    assert lh.describe_table("ns.u").partition_by == ()


def test_each_file_holds_one_partition(lh):
    create(lh, partition_by=["day(ts)"])
    lh.append("ns.t", rows(range(50)))  # 5 days
    files = lh.list_data_files("ns.t")
    assert len(files) == 5
    days = sorted(f.partition["ts_day"] for f in files)
    first = (DAY0.date() - dt.date(1970, 1, 1)).days
    assert days == [first + i for i in range(5)]
    for f in files:
        t = pa.parquet.read_table(data_path(lh, f)) if hasattr(pa, "parquet") else None
        import pyarrow.parquet as pq

        t = pq.read_table(data_path(lh, f))
        got = {(ts.date() - dt.date(1970, 1, 1)).days for ts in t.column("ts").to_pylist()}
        assert got == {f.partition["ts_day"]}
        assert f.file_id.startswith("p")


def test_read_of_one_partition_needs_only_its_files(lh):
    create(lh, partition_by=["day(ts)"])
    for day in range(6):
        lh.append("ns.t", rows(range(day * 10, day * 10 + 10), day=day))
    files = lh.list_data_files("ns.t")
    first = (DAY0.date() - dt.date(1970, 1, 1)).days
    keep = [f for f in files if f.partition["ts_day"] == first + 2]
    for f in files:
        if f not in keep:
            os.remove(data_path(lh, f))
    day2 = DAY0 + dt.timedelta(days=2)
    day3 = day2 + dt.timedelta(days=1)
    where = (
        f"ts >= TIMESTAMP '{day2:%Y-%m-%d} 00:00:00+00:00' "
        f"AND ts < TIMESTAMP '{day3:%Y-%m-%d} 00:00:00+00:00'"
    )
    got = lh.read("ns.t", where=where)
    assert sorted(got.column("id").to_pylist()) == list(range(20, 30))
    with pytest.raises(lakehouse.LakehouseError):
        lh.read("ns.t")


def test_identity_partition_equality_and_in(lh):
    create(lh, partition_by=["country"])
    for c in ("DE", "FR", "US", None):
        lh.append("ns.t", rows(range(3), country=c))
    files = {f.partition["country"]: f for f in lh.list_data_files("ns.t")}
    assert set(files) == {"DE", "FR", "US", None}
    os.remove(data_path(lh, files["US"]))
    os.remove(data_path(lh, files[None]))
    assert lh.read("ns.t", where="country = 'DE'").num_rows == 3
    assert lh.read("ns.t", where="country IN ('DE', 'FR')").num_rows == 6
    with pytest.raises(lakehouse.LakehouseError):
        lh.read("ns.t", where="country IS NULL")


def test_partition_evolution_with_time_travel(lh):
    create(lh, partition_by=["country"])
    lh.append("ns.t", rows(range(10), country="DE"))
    v1 = lh.version
    with lh.begin() as t:
        t.alter_table("ns.t", partition_by=["day(ts)"])
    d = lh.describe_table("ns.t")
    assert d.partition_by == ("day(ts)",)
    assert [s.spec_id for s in d.partition_specs] == [0, 1]
    lh.append("ns.t", rows(range(10, 20), country="FR"))
    specs = sorted({f.spec_id for f in lh.list_data_files("ns.t")})
    assert specs == [0, 1]
    # old files keep their spec and are pruned by it
    old = [f for f in lh.list_data_files("ns.t") if f.spec_id == 0]
    assert [f.partition for f in old] == [{"country": "DE"}]
    assert sorted(lh.read("ns.t", where="country = 'DE'").column("id").to_pylist()) == list(
        range(10)
    )
    assert lh.read("ns.t", where="country = 'FR'").num_rows == 10
    with lh.at_version(v1) as view:
        assert view.describe_table("ns.t").partition_by == ("country",)
        assert view.read("ns.t").num_rows == 10
    # back to a spec the table had: its id is reused
    with lh.begin() as t:
        t.alter_table("ns.t", partition_by=["country"])
    assert lh.describe_table("ns.t").spec_id == 0
    # and unpartitioned
    with lh.begin() as t:
        t.alter_table("ns.t", partition_by=[])
    lh.append("ns.t", rows([99]))
    assert lh.read("ns.t").num_rows == 21
    assert lh.read("ns.t", where="id = 99").num_rows == 1


def test_replace_partitions(lh):
    create(lh, partition_by=["day(ts)"])
    for day in range(3):
        lh.append("ns.t", rows(range(day * 10, day * 10 + 10), day=day))
    n = lh.replace_partitions("ns.t", rows([100, 101], day=1))
    assert n == 2
    got = sorted(lh.read("ns.t").column("id").to_pylist())
    assert got == [*range(10), *range(20, 30), 100, 101]
    info = next(i for i in lh.history() if i.version == lh.version)
    assert [c.op for c in info.changes] == ["overwrite"]


def test_replace_partitions_across_specs(lh):
    """Rows of files written under an older spec that fall in a replaced partition go."""
    create(lh)  # unpartitioned: one file with three days
    lh.append("ns.t", rows(range(30)))  # days 0..4 by id % 5
    with lh.begin() as t:
        t.alter_table("ns.t", partition_by=["day(ts)"])
    lh.replace_partitions("ns.t", rows([1000], day=0))
    got = lh.read("ns.t")
    days = pc.day(got.column("ts")).to_pylist()
    assert sorted(got.column("id").to_pylist()) == sorted(
        [i for i in range(30) if i % 5 != 0] + [1000]
    )
    assert days.count(1) == 1  # DAY0 is the 1st


def test_replace_partitions_on_unpartitioned_is_overwrite(lh):
    create(lh)
    lh.append("ns.t", rows(range(5)))
    lh.replace_partitions("ns.t", rows([7]))
    assert lh.read("ns.t").column("id").to_pylist() == [7]


def test_replace_partitions_null_partition(lh):
    create(lh, partition_by=["country"])
    lh.append("ns.t", rows([1, 2], country=None))
    lh.append("ns.t", rows([3], country="DE"))
    lh.replace_partitions("ns.t", rows([9], country=None))
    assert sorted(lh.read("ns.t").column("id").to_pylist()) == [3, 9]


def test_concurrent_writers_of_other_partitions_do_not_conflict(lh):
    create(lh, partition_by=["day(ts)"])
    lh.append("ns.t", rows(range(10), day=0))
    a = lh.begin()
    a.replace_partitions("ns.t", rows([100], day=0))
    lh.append("ns.t", rows([200], day=3))  # another partition, committed first
    a.commit()
    assert sorted(lh.read("ns.t").column("id").to_pylist()) == [100, 200]


def test_concurrent_insert_into_replaced_partition_conflicts(lh):
    create(lh, partition_by=["day(ts)"])
    lh.append("ns.t", rows(range(10), day=0))
    a = lh.begin()
    a.replace_partitions("ns.t", rows([100], day=0))
    lh.append("ns.t", rows([200], day=0))
    with pytest.raises(lakehouse.RetryableConflict):
        a.commit()
    assert sorted(lh.read("ns.t").column("id").to_pylist()) == [*range(10), 200]


def test_delete_restricted_to_partition_touches_only_its_files(lh):
    create(lh, partition_by=["country"])
    for c in ("DE", "FR"):
        lh.append("ns.t", rows(range(5), country=c))
    files = {f.partition["country"]: f for f in lh.list_data_files("ns.t")}
    os.remove(data_path(lh, files["FR"]))
    assert lh.delete("ns.t", "country = 'DE' AND id < 2") == 2
    assert lh.read("ns.t", where="country = 'DE'").num_rows == 3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (["nope(ts)"], "nope"),
        (["day(country)"], "day"),
        (["bucket(0, id)"], "bucket"),
        (["missing"], "missing"),
        (["day(ts)", "day(ts)"], "twice|duplicate|same"),
        ([1], None),
    ],
)
def test_bad_partition_specs(lh, spec, message):
    err = TypeError if message is None else ValueError
    with pytest.raises(err, match=message), lh.begin() as t:
        t.create_table("ns.bad", SCHEMA, partition_by=spec)
    assert not lh.table_exists("ns.bad")


def test_evolution_to_a_dropped_column_and_dropping_a_source_column(lh):
    create(lh, partition_by=["country"])
    with pytest.raises(ValueError, match="country"), lh.begin() as t:
        t.alter_table("ns.t", schema=SCHEMA.remove(SCHEMA.get_field_index("country")))
    with pytest.raises(ValueError, match="gone"), lh.begin() as t:
        t.alter_table("ns.t", partition_by=["gone"])
    assert lh.describe_table("ns.t").partition_by == ("country",)
