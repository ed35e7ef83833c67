"""Inlined rows: small writes kept in the kvstore as inline data files.

API.md "Table layout" (the inlining bullet), lakehouse/data/inline.py. What is
checked here:

* the bounds of an inline file equal those of the Parquet file of the same
  rows, for every orderable type, random values and the edges (NaN, signed
  zeros, infinities, long strings, all-null columns);
* every small write (append, overwrite, update, merge, replace_partitions)
  is inlined: no file in storage, rows in the kvstore; ``inline.max_rows``
  bounds it (0 turns it off) and bad values are refused, nothing written;
* a seeded random sequence of operations reads, time-travels and feeds
  ``changes`` exactly as the same sequence on a table that writes Parquet;
* deletes of inlined rows are deletion vectors; restore, clone, SERIALIZABLE
  conflicts, a reader in another process, export, expiry and orphan removal,
  renamed columns and partition pruning treat inline files as files;
* a flipped byte in an inline record's payload is a CorruptionError naming the
  file, on reads and in ``lakehouse verify``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import re
import subprocess
import sys
import textwrap
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from parquet_files import PARQUET
from test_lakehouse_stats import KINDS, MAX_CHAR

import lakehouse
from lakehouse import codec, keys
from lakehouse.cli.main import main
from lakehouse.data import files as datafiles
from lakehouse.data import inline, record
from lakehouse.data.stats import MAX_STATISTICS_BYTES
from lakehouse.maintenance import deletion_queue
from lakehouse.model import Column

T = "ns.t"
SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("p", pa.string())])
NO_AUTO = {"compaction.auto": "false"}


def table_of(ks: list[int], v: str = "x", p: str = "a") -> pa.Table:
    return pa.table({"k": ks, "v": [f"{v}{k}" for k in ks], "p": [p] * len(ks)}, schema=SCHEMA)


def rows_of(h: Any, table: str = T, **kw: Any) -> list[tuple[Any, ...]]:
    t = h.read(table, **kw)
    return sorted(tuple(r.values()) for r in t.to_pylist())


def stored(h: Any) -> set[str]:
    """The data files in storage."""
    return set(h.data_store.list(""))


@pytest.fixture
def lh() -> Any:
    h = lakehouse.open(f"memory://inline-{uuid.uuid4().hex}")
    with h.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table(T, SCHEMA, NO_AUTO)
    yield h
    h.close()


# -- bounds: the footer's, computed from Arrow -----------------------------------------------
def _columns(t: pa.Table) -> list[Column]:
    return [Column(i + 1, f.name, str(f.type)) for i, f in enumerate(t.schema)]


def _footer_raw(t: pa.Table) -> tuple[Any, ...]:
    data, footer = datafiles.encode_parquet(t)
    f = datafiles.describe_footer("t/f.parquet", len(data), footer, t.schema, _columns(t), data)
    return f.raw_stats


def _inline_raw(t: pa.Table) -> tuple[Any, ...]:
    f = inline.describe("t/f.inline", inline.encode(t), t, _columns(t))
    # and through the record, as a read finds it
    g = record.decode_file(record.encode_file(f))
    assert g.raw_stats == f.raw_stats and g.inline == f.inline and g.is_inline
    return f.raw_stats


def _same(a: Any, b: Any) -> bool:
    """Equal, -0.0 and 0.0 told apart (json: the stored form)."""
    return json.dumps(a) == json.dumps(b)


@pytest.mark.parametrize("name", sorted(KINDS))
def test_bounds_equal_the_parquet_footers_for_random_values(name: str) -> None:
    kind = KINDS[name]
    rng = random.Random(f"inline-bounds-{name}")
    for _ in range(25):
        n = rng.choice([1, 2, 5, 40])
        nulls = rng.choice([0.0, 0.3, 1.0])
        c = rng.randint(0, 9)
        values = [None if rng.random() < nulls else kind.value(rng, c) for _ in range(n)]
        t = pa.table({"x": kind.array(values)})
        assert _same(_inline_raw(t), _footer_raw(t)), values


EDGES: dict[str, pa.Array] = {
    "nan_only": pa.array([math.nan, math.nan]),
    "nan_and_null": pa.array([math.nan, None]),
    "nan_mixed": pa.array([math.nan, 1.5, -2.0]),
    "zeros": pa.array([0.0, -0.0]),
    "zero_low": pa.array([0.0, 3.0]),
    "zero_high": pa.array([-3.0, -0.0]),
    "infinities": pa.array([math.inf, -math.inf, 1.0]),
    "plus_inf_only": pa.array([math.inf]),
    "float16": pa.array([1.5, -2.5, None], pa.float16()),
    "float32_nan": pa.array([math.nan, 2.5], pa.float32()),
    "uint64_max": pa.array([2**64 - 1, 0], pa.uint64()),
    "int8": pa.array([-128, 127], pa.int8()),
    "bool": pa.array([True, False, None]),
    "bool_true": pa.array([True, True]),
    "decimal": pa.array([Decimal("1.50"), Decimal("-3.25"), None], pa.decimal128(10, 2)),
    "decimal256": pa.array([Decimal("1" * 40 + ".5")], pa.decimal256(45, 1)),
    "string_unicode": pa.array(["é", "z", "\x00", None]),
    "string_max_char": pa.array([MAX_CHAR * 70, "a"]),
    "string_long_upper": pa.array(["a", "b" * 100]),
    "string_at_limit": pa.array(["a" * MAX_STATISTICS_BYTES, "b"]),
    "string_over_limit_low": pa.array(["a" * (MAX_STATISTICS_BYTES + 1), "b"]),
    "string_over_limit_high": pa.array(["a", "b" * (MAX_STATISTICS_BYTES + 1)]),
    "string_multibyte_over": pa.array(["é" * (MAX_STATISTICS_BYTES // 2 + 1), "a"]),
    "large_string": pa.array(["q", "r"], pa.large_string()),
    "string_view": pa.array(["q", None, "r"], pa.string_view()),
    "binary_ff": pa.array([b"\xff" * 70, b"\x00"]),
    "binary_view": pa.array([b"q", b"r"], pa.binary_view()),
    "binary_over_limit": pa.array([b"a" * (MAX_STATISTICS_BYTES + 1)]),
    "fixed_binary_long": pa.array([b"a" * 70], pa.binary(70)),
    "date32": pa.array([dt.date(2020, 1, 1), dt.date(1969, 1, 1)]),
    "date64_partial_days": pa.array([86_400_000 * 3 + 5, -86_400_000 - 7], pa.date64()),
    "time32s": pa.array([5, 7], pa.time32("s")),
    "time64ns": pa.array([5, 7, None], pa.time64("ns")),
    "ts_s": pa.array([1, -1], pa.timestamp("s")),
    "ts_ms_tz": pa.array([1, -1], pa.timestamp("ms", "Europe/Paris")),
    "ts_ns": pa.array([123_456_789, -5], pa.timestamp("ns")),
    "duration_s": pa.array([5, -7], pa.duration("s")),
    "all_null_int": pa.array([None, None], pa.int64()),
    "all_null_string": pa.array([None], pa.string()),
    "all_null_ts": pa.array([None, None], pa.timestamp("us", "UTC")),
    "null_type": pa.nulls(3),
    "struct": pa.array([{"a": 1}, None]),
    "list": pa.array([[1], None, []]),
}


@pytest.mark.parametrize("name", sorted(EDGES))
def test_bounds_equal_the_parquet_footers_at_the_edges(name: str) -> None:
    t = pa.table({"x": EDGES[name], "y": pa.array(range(len(EDGES[name])), pa.int32())})
    assert _same(_inline_raw(t), _footer_raw(t))


def test_bounds_of_a_written_table_equal_the_parquet_ones(lh: Any) -> None:
    """Through the API: list_data_files of the same rows, inlined and in Parquet."""
    data = pa.table(
        {
            "i": pa.array([3, None, -7], pa.int16()),
            "f": pa.array([math.nan, -0.0, 2.5]),
            "d": pa.array([Decimal("1.10"), None, Decimal("-2.00")], pa.decimal128(6, 2)),
            "s": pa.array(["b" * 90, "a", None]),
            "b": pa.array([b"\xff" * 3, b"", None]),
            "day": pa.array([dt.date(2024, 2, 1), None, dt.date(1999, 1, 1)]),
            "t": pa.array([dt.time(1, 2, 3), dt.time(0, 0), None]),
            "ts": pa.array([1, 2, None], pa.timestamp("us")),
            "tz": pa.array([1, None, 3], pa.timestamp("ns", "UTC")),
            "flag": pa.array([True, None, True]),
            "none": pa.array([None, None, None], pa.int64()),
        }
    )
    with lh.begin() as txn:
        txn.create_table("ns.inl", data.schema, NO_AUTO)
        txn.create_table("ns.pq", data.schema, {**NO_AUTO, **PARQUET})
        txn.append("ns.inl", data)
        txn.append("ns.pq", data)
    (a,), (b,) = lh.list_data_files("ns.inl"), lh.list_data_files("ns.pq")
    assert a.is_inline and not b.is_inline
    assert _same(a.raw_stats, b.raw_stats)
    assert a.stats == b.stats and a.stats["day"].min == dt.date(1999, 1, 1)


# -- the writes that inline ------------------------------------------------------------------
def test_small_writes_are_inlined_and_nothing_reaches_storage(lh: Any) -> None:
    with lh.begin() as txn:
        txn.create_table("ns.parts", SCHEMA, NO_AUTO, partition_by=["p"])
    lh.append(T, table_of([1, 2, 3]))
    lh.overwrite(T, table_of([4, 5]), where="k >= 4")
    lh.update(T, "k = 1", {"v": "'u1'"})
    res = lh.merge(T, table_of([2, 9], "m"), on="k")
    assert (res.inserted, res.updated) == (1, 1)
    lh.append("ns.parts", table_of([1, 2], p="a"))
    lh.replace_partitions("ns.parts", table_of([7], p="a"))
    lh.overwrite(T, table_of([10, 11]))
    assert stored(lh) == set()
    for table in (T, "ns.parts"):
        files = lh.list_data_files(table)
        assert files and all(f.is_inline and f.path.endswith(inline.SUFFIX) for f in files)
        assert all(f.file_id.endswith(datafiles.file_id_of(f.path)) for f in files)
    assert rows_of(lh) == [(10, "x10", "a"), (11, "x11", "a")]
    assert rows_of(lh, "ns.parts") == [(7, "x7", "a")]
    s = lh.table_stats(T)
    assert (s.rows, s.inlined_rows, s.files) == (2, 2, 1)
    assert s.bytes == sum(f.bytes for f in lh.list_data_files(T))


def test_max_rows_bounds_inlining_and_zero_turns_it_off(lh: Any) -> None:
    with lh.begin() as txn:
        txn.alter_table(T, set_properties={inline.PROPERTY: "3"})
    lh.append(T, table_of([1, 2, 3]))  # exactly the limit: inlined
    assert stored(lh) == set()
    lh.append(T, table_of([4, 5, 6, 7]))  # one more: a Parquet file
    assert len(stored(lh)) == 1
    with lh.begin() as txn:
        txn.alter_table(T, set_properties={inline.PROPERTY: "0"})
    lh.append(T, table_of([8]))
    assert len(stored(lh)) == 2
    kinds = sorted(f.is_inline for f in lh.list_data_files(T))
    assert kinds == [False, False, True]
    assert lh.table_stats(T).inlined_rows == 3
    assert [k for k, _, _ in rows_of(lh)] == list(range(1, 9))


def test_default_max_rows() -> None:
    d = lakehouse.open(f"memory://inline-{uuid.uuid4().hex}")
    with d.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table(T, SCHEMA)
    assert inline.max_rows(d.describe_table(T)) == inline.DEFAULT_MAX_ROWS
    d.append(T, table_of(list(range(inline.DEFAULT_MAX_ROWS))))
    assert stored(d) == set() and d.table_stats(T).inlined_rows == inline.DEFAULT_MAX_ROWS
    d.close()


@pytest.mark.parametrize("bad", ["-1", "x", "1.5", "", "1e3", "٣"])
def test_bad_max_rows_is_refused_and_nothing_is_written(lh: Any, bad: str) -> None:
    v = lh.version
    with pytest.raises(ValueError, match=r"inline\.max_rows"), lh.begin() as txn:
        txn.create_table("ns.bad", SCHEMA, {inline.PROPERTY: bad})
    with pytest.raises(ValueError, match=r"inline\.max_rows"), lh.begin() as txn:
        txn.alter_table(T, set_properties={inline.PROPERTY: bad})
    assert lh.version == v and not lh.table_exists("ns.bad")
    assert inline.PROPERTY not in lh.describe_table(T).properties
    with pytest.raises(ValueError, match=r"inline\.max_rows"):
        inline.check_property(bad)


# -- the same rows as Parquet: a seeded random sequence -----------------------------------
def _random_op(rng: random.Random, next_key: list[int]) -> tuple[str, Any]:
    def fresh(n: int) -> list[int]:
        ks = list(range(next_key[0], next_key[0] + n))
        next_key[0] += n
        return ks

    def small() -> int:
        return rng.choice([1, 2, 5, 20, 60])  # 60 rows: over the inlined table's limit

    lo = rng.randint(0, max(1, next_key[0]))
    where = rng.choice([f"k >= {lo} AND k < {lo + rng.randint(1, 30)}", f"k % 7 = {lo % 7}"])
    p = rng.choice(["a", "b", "c"])
    op = rng.choice(
        ["append"] * 4 + ["delete", "update", "merge", "overwrite_where", "replace", "compact"]
    )
    if op == "append":
        return op, table_of(fresh(small()), rng.choice("xy"), p)
    if op == "delete":
        return op, where
    if op == "update":
        return op, (where, {"v": f"'u{rng.randint(0, 99)}'"})
    if op == "merge":
        old = rng.sample(range(max(1, next_key[0])), k=min(3, max(1, next_key[0])))
        return op, table_of(sorted(set(old)) + fresh(rng.randint(0, 3)), "m", p)
    if op == "overwrite_where":
        ks = [k for k in fresh(small())]
        return op, (table_of(ks, "o", p), f"k >= {ks[0]}")
    if op == "replace":
        return op, table_of(fresh(small()), "r", p)
    return op, None


def _apply(txn: Any, table: str, op: str, arg: Any) -> None:
    if op == "append":
        txn.append(table, arg)
    elif op == "delete":
        txn.delete(table, arg)
    elif op == "update":
        txn.update(table, *arg)
    elif op == "merge":
        txn.merge(table, arg, on="k")
    elif op == "overwrite_where":
        txn.overwrite(table, arg[0], where=arg[1])
    elif op == "replace":
        txn.replace_partitions(table, arg)
    else:
        txn.compact(table)


def _feed(h: Any, table: str, start: int) -> list[str]:
    t = h.changes(table, start)
    return sorted(json.dumps(r, sort_keys=True) for r in t.to_pylist())


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_read_as_parquet_does(seed: int) -> None:
    """Two tables, one inlining writes of up to 50 rows and one writing Parquet,
    through the same random operations (several per transaction): every version
    reads the same rows, with and without a where, and ``changes`` agree."""
    rng = random.Random(f"inline-differential-{seed}")
    h = lakehouse.open(f"memory://inline-diff-{uuid.uuid4().hex}")
    with h.begin() as txn:
        txn.create_namespace("ns")
        for name, props in (("ns.inl", {inline.PROPERTY: "50"}), ("ns.pq", PARQUET)):
            txn.create_table(name, SCHEMA, {**NO_AUTO, **props}, partition_by=["p"])
    start = h.version + 1
    next_key = [0]
    versions = []
    inlined = 0
    for _ in range(30):
        ops = [_random_op(rng, next_key) for _ in range(rng.choice([1, 1, 2]))]
        with h.begin() as txn:
            for op, arg in ops:
                for name in ("ns.inl", "ns.pq"):
                    _apply(txn, name, op, arg)
        versions.append(h.version)
        inlined = max(inlined, h.table_stats("ns.inl").inlined_rows)
        assert h.table_stats("ns.pq").inlined_rows == 0
        assert rows_of(h, "ns.inl") == rows_of(h, "ns.pq"), ops
        where = f"k < {rng.randint(0, next_key[0] + 1)} OR p = 'b'"
        assert rows_of(h, "ns.inl", where=where) == rows_of(h, "ns.pq", where=where)
    assert inlined > 0
    for v in rng.sample(versions, 5):
        with h.at_version(v) as view:
            assert rows_of(view, "ns.inl") == rows_of(view, "ns.pq")
    batches = h.scan_batches("ns.inl").read_all()
    assert sorted(tuple(r.values()) for r in batches.to_pylist()) == rows_of(h, "ns.pq")
    assert _feed(h, "ns.inl", start) == _feed(h, "ns.pq", start)
    h.close()


# -- deletes, time travel, restore, clone -----------------------------------------------------
def test_deletes_of_inlined_rows_are_deletion_vectors(lh: Any) -> None:
    lh.append(T, table_of([1, 2, 3, 4]))
    v1 = lh.version
    (f,) = lh.list_data_files(T)
    lh.delete(T, "k = 2 OR k = 4")
    (g,) = lh.list_data_files(T)
    assert g.path == f.path and g.deleted_rows == 2 and g.is_inline
    ((_, dv),) = lh.file_states(T)
    assert sorted(dv) == [1, 3]  # positions in the inline file
    assert lh.table_stats(T).inlined_rows == 2
    assert [k for k, _, _ in rows_of(lh)] == [1, 3]
    with lh.at_version(v1) as old:  # time travel
        assert [k for k, _, _ in rows_of(old)] == [1, 2, 3, 4]
    rec = lh.history()[0]
    assert rec.data[0].deleted and not rec.data[0].added
    assert stored(lh) == set()


def test_restore_and_clone_keep_inlined_rows(lh: Any) -> None:
    lh.append(T, table_of([1, 2]))
    v1 = lh.version
    lh.append(T, table_of([3]))
    lh.delete(T, "k = 1")
    with lh.begin() as txn:
        txn.restore_table(T, v1)
    assert [k for k, _, _ in rows_of(lh)] == [1, 2]
    with lh.begin() as txn:
        txn.clone_table(T, "ns.copy")
    lh.append("ns.copy", table_of([7]))
    assert [k for k, _, _ in rows_of(lh, "ns.copy")] == [1, 2, 7]
    assert [k for k, _, _ in rows_of(lh)] == [1, 2]
    assert all(f.is_inline for f in lh.list_data_files("ns.copy"))
    assert stored(lh) == set()


def test_changes_of_inlined_rows(lh: Any) -> None:
    v0 = lh.version
    lh.append(T, table_of([1, 2]))
    lh.update(T, "k = 1", {"v": "'new'"})
    lh.delete(T, "k = 2")
    got = sorted(
        (r["_version"] - v0, r["_change_type"], r["k"], r["v"])
        for r in lh.changes(T, v0 + 1).to_pylist()
    )
    assert got == [
        (1, "insert", 1, "x1"),
        (1, "insert", 2, "x2"),
        (2, "update_postimage", 1, "new"),
        (2, "update_preimage", 1, "x1"),
        (3, "delete", 2, "x2"),
    ]


# -- conflicts and other processes ----------------------------------------------------------
def test_serializable_read_conflicts_with_a_concurrent_inline_insert(lh: Any) -> None:
    lh.append(T, table_of([10, 20, 30]))
    reader = lh.begin(lakehouse.Isolation.SERIALIZABLE)
    assert [k for k, _, _ in rows_of(reader, where="k >= 15 AND k < 40")] == [20, 30]
    reader.append(T, table_of([1000]))
    lh.append(T, table_of([25]))  # matches the read: inlined
    assert lh.list_data_files(T)[-1].is_inline
    with pytest.raises(lakehouse.RetryableConflict):
        reader.commit()
    assert [k for k, _, _ in rows_of(lh)] == [10, 20, 25, 30]
    # an insert the read did not cover commits beside it
    reader = lh.begin(lakehouse.Isolation.SERIALIZABLE)
    rows_of(reader, where="k >= 15 AND k < 40")
    reader.append(T, table_of([1000]))
    lh.append(T, table_of([500]))
    reader.commit()
    assert [k for k, _, _ in rows_of(lh)] == [10, 20, 25, 30, 500, 1000]


def test_a_reader_in_another_process_reads_inlined_rows(tmp_path: Path) -> None:
    url = str(tmp_path / "lh")
    script = textwrap.dedent(
        f"""
        import json, lakehouse
        with lakehouse.open_reader({url!r}) as r:
            t = r.read({T!r})
            print(json.dumps([r.version, sorted(t.column("k").to_pylist()),
                              r.table_stats({T!r}).inlined_rows]))
        """
    )
    with lakehouse.open(url) as h:
        with h.begin() as txn:
            txn.create_namespace("ns")
            txn.create_table(T, SCHEMA, NO_AUTO)
        for i in range(3):
            h.append(T, table_of([i * 10, i * 10 + 1]))
            out = subprocess.run(
                [sys.executable, "-c", script], capture_output=True, text=True, check=True
            )
            version, ks, inlined = json.loads(out.stdout)
            assert version == h.version
            assert ks == sorted(k for j in range(i + 1) for k in (j * 10, j * 10 + 1))
            assert inlined == len(ks)
        assert not any(p.suffix == ".parquet" for p in (tmp_path / "lh").rglob("*"))


def test_export_carries_inlined_rows_in_the_state(tmp_path: Path) -> None:
    src = lakehouse.open(str(tmp_path / "src"))
    with src.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table(T, SCHEMA, NO_AUTO)
        txn.create_table("ns.pq", SCHEMA, {**NO_AUTO, **PARQUET})
    src.append(T, table_of([1, 2, 3]))
    src.append("ns.pq", table_of([4]))
    src.delete(T, "k = 2")
    for kind in ("full", "minimal"):
        summary = src.export(str(tmp_path / kind), kind=kind)
        assert summary["files_copied"] == (1 if kind == "full" else 0)
        with lakehouse.open(str(tmp_path / kind)) as dst:
            assert rows_of(dst) == rows_of(src)
            assert rows_of(dst, "ns.pq") == rows_of(src, "ns.pq")
            (f,) = dst.list_data_files(T)
            assert f.is_inline and not f.is_external and f.deleted_rows == 1
        assert main(["verify", str(tmp_path / kind)]) == 0
    src.close()


def test_expiry_and_orphan_removal_never_touch_inline_paths(tmp_path: Path) -> None:
    h = lakehouse.open(str(tmp_path / "lh"))
    with h.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table(T, SCHEMA, NO_AUTO)
    h.append(T, table_of([1, 2]))
    gone = h.list_data_files(T)[0].path
    h.overwrite(T, table_of([3]))  # the first inline file leaves the head
    with h.begin() as txn:
        txn.alter_table(T, set_properties=PARQUET)
    h.overwrite(T, table_of([4]))  # a Parquet file...
    parquet = {f.path for f in h.list_data_files(T)}
    h.overwrite(T, table_of([5]))  # ... that leaves the head too
    h.expire_versions(keep_last=1, grace=dt.timedelta(hours=1))
    queued = {q.path for q in deletion_queue(h.kvstore)}
    assert queued == parquet and gone not in queued
    assert h.remove_orphan_files(older_than=dt.timedelta(0)) == []
    assert [k for k, _, _ in rows_of(h)] == [5]
    assert stored(h) == parquet | {f.path for f in h.list_data_files(T)}
    h.close()


# -- damage -----------------------------------------------------------------------------------
def _flip_payload_byte(h: Any, f: Any) -> None:
    """Put ``f``'s record back with one byte of its payload changed (a foreign
    writer, a bug: the kvstore's own checksums cannot see it)."""
    ns, t = T.split(".")
    raw = h.kvstore.get(keys.data_file_key(ns, t, f.file_id))
    assert raw[:1] == bytes([record.INLINE_FORMAT])
    bad = bytearray(raw)
    bad[len(raw) - len(f.inline) // 2] ^= 0x10
    tk = keys.table_key(ns, t)
    d = h.kvstore.get(tk)
    with h.begin() as txn:
        txn.apply_state({tk: d, keys.data_file_key(ns, t, f.file_id): bytes(bad)}, current={tk: d})
    assert codec.decode_data_file(bytes(bad)).inline != f.inline


def test_a_flipped_payload_byte_is_corruption_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path / "lh")
    h = lakehouse.open(url)
    with h.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table(T, SCHEMA, NO_AUTO)
    h.append(T, table_of(list(range(200))))
    h.append(T, table_of([1000]))
    f = h.list_data_files(T)[0]
    _flip_payload_byte(h, f)
    for read in (
        lambda: h.read(T),
        lambda: h.read(T, where="k < 5"),
        lambda: h.scan_batches(T).read_all(),
        lambda: h.delete(T, "k = 3"),
    ):
        with pytest.raises(lakehouse.CorruptionError, match=re.escape(f.path)):
            read()
    h.close()
    capsys.readouterr()
    assert main(["--json", "verify", url]) == 3
    report = json.loads(capsys.readouterr().out)
    problems = [p for p in report["problems"] if f.path in p["object"] + p["message"]]
    assert problems and problems[0]["kind"] == "corrupt"
    assert len(report["problems"]) == 1  # the sound inline file passed


def test_a_payload_that_is_not_arrow_is_corruption() -> None:
    with pytest.raises(lakehouse.CorruptionError, match=r"t/x\.inline"):
        inline.decode(b"not arrow at all", "t/x.inline")
    good = inline.encode(table_of([1, 2]))
    with pytest.raises(lakehouse.CorruptionError, match=r"t/x\.inline"):
        inline.decode(good[: len(good) // 2], "t/x.inline")


# -- columns and partitions -------------------------------------------------------------------
def test_renamed_and_added_columns_read_through_ids(lh: Any) -> None:
    lh.append(T, table_of([1, 2]))
    with lh.begin() as txn:
        txn.alter_table(T, rename_columns={"v": "value"})
    with lh.begin() as txn:
        txn.alter_table(
            T,
            schema=pa.schema(
                [("k", pa.int64()), ("value", pa.string()), ("p", pa.string()), ("n", pa.int32())]
            ),
        )
    t = lh.read(T, where="value = 'x2'")
    assert t.to_pylist() == [{"k": 2, "value": "x2", "p": "a", "n": None}]
    (f,) = lh.list_data_files(T)
    assert f.is_inline and "value" in f.stats and f.stats["value"].max == "x2"


def test_partitioned_inline_writes_prune(lh: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    with lh.begin() as txn:
        txn.create_table("ns.parts", SCHEMA, NO_AUTO, partition_by=["p"])
    data = pa.concat_tables([table_of([1, 2], p="a"), table_of([3], p="b"), table_of([4], p="c")])
    lh.append("ns.parts", data)
    lh.append("ns.parts", table_of([100, 101], p="a"))
    files = lh.list_data_files("ns.parts")
    assert len(files) == 4 and all(f.is_inline for f in files)
    assert {f.file_id.startswith("p") for f in files} == {True}  # partitioned ids
    assert sorted(f.partition["p"] for f in files) == ["a", "a", "b", "c"]
    decoded: list[int] = []
    real = inline.decode

    def counting(payload: bytes, path: str) -> pa.Table:
        t = real(payload, path)
        decoded.append(t.num_rows)
        return t

    monkeypatch.setattr(inline, "decode", counting)
    assert [k for k, _, _ in rows_of(lh, "ns.parts", where="p = 'b'")] == [3]
    assert decoded == [1]  # one partition's file
    decoded.clear()
    assert [k for k, _, _ in rows_of(lh, "ns.parts", where="k >= 100")] == [100, 101]
    assert decoded == [2]  # by the bounds of k
    assert stored(lh) == set()


def test_cli_stats_show_inlined_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "lh")
    with lakehouse.open(url) as h:
        with h.begin() as txn:
            txn.create_namespace("ns")
            txn.create_table(T, SCHEMA, NO_AUTO)
        h.append(T, table_of([1, 2, 3]))
    capsys.readouterr()
    assert main(["--json", "stats", url, T]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["rows"], doc["inlined_rows"]) == (3, 3)
    assert main(["stats", url, T]) == 0
    assert "inlined rows  3" in capsys.readouterr().out
    assert main(["--json", "files", url, T]) == 0
    (f,) = json.loads(capsys.readouterr().out)["files"]
    assert f["inline"] is True and f["rows"] == 3
