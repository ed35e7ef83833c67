"""Tables with view-typed columns (``string_view``, ``binary_view``).

pyarrow has no filter, take, sort, comparison or join kernels for view types;
lakehouse/data/rows.py selects rows of any type and predicates read view
columns as their large non-view types. What is checked here: one seeded
sequence of every data operation (append, reads with ``where``, delete,
update, merge on a view key and on a partial source, overwrite with ``where``,
replace_partitions, compact, ``changes``, time travel) runs on a table with
view columns (plain, in a struct, in a list) and on its twin with
string/binary columns, in the same transactions, for each layout (Parquet
only, inlined rows, partitioned by a view column, truncate-partitioned,
sorted by view columns, a view primary key): every result equals the twin's
(values compared as Python values) and keeps the view types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lakehouse
from lakehouse.data.rows import filter_rows, join, plain, plain_type, sort_indices, take_rows

SV, BV = pa.string_view(), pa.binary_view()


def _schema(s: pa.DataType, b: pa.DataType) -> pa.Schema:
    return pa.schema(
        [
            ("id", pa.int64()),
            ("c", s),
            ("b", b),
            ("s", pa.struct([("x", s), ("y", b)])),
            ("l", pa.list_(s)),
        ]
    )


VIEW = _schema(SV, BV)
PLAIN = _schema(pa.string(), pa.binary())


def rows(ids: list[int], schema: pa.Schema, tag: str = "v") -> pa.Table:
    """Rows ``ids``: short values (inside a view) and long ones (in its buffers)."""
    long = "-é" * 9  # > 12 bytes: not inlined in the view
    return pa.table(
        {
            "id": ids,
            "c": [f"{tag}{i}" + (long if i % 2 else "") for i in ids],
            "b": [f"b{i}".encode() * (1 if i % 3 else 8) for i in ids],
            "s": [
                None if i == 7 else {"x": f"x{i}" * (i % 4 + 1), "y": None if i % 5 == 0 else b"y"}
                for i in ids
            ],
            "l": [None if i % 4 == 0 else [f"{tag}{i}", "z" * i] for i in ids],
        },
        schema=schema,
    )


LAYOUTS: dict[str, dict[str, Any]] = {
    "parquet": {},
    "inlined": {},
    "partition_c": {"partition_by": ["c"]},
    "partition_b_truncate": {"partition_by": ["truncate(2, b)", "truncate(1, c)"]},
    "sort_c": {"sort_keys": ["c"]},
    "sort_b_c": {"sort_keys": ["b", "c"]},
    "pk_c": {"primary_key": ["c"]},
    "pk_b": {"primary_key": ["b"]},
}


def same(got: pa.Table, want: pa.Table) -> None:
    """The same rows, as Python values (in any order)."""
    assert got.num_rows == want.num_rows
    assert sorted(got.to_pylist(), key=repr) == sorted(want.to_pylist(), key=repr)


WHERES: list[Any] = [
    "id > 2",
    "c = 'v3'",
    "c < 'v5'",
    "c >= 'v3' AND id < 8",
    "c IN ('v1', 'v6', 'w3')",
    "c LIKE 'v1%'",
    "upper(c) = 'V6'",
    "c IS NULL OR b IS NULL",
    pc.field("b") == b"b4",
    pc.field("c") == "v2" + "-é" * 9,
    pc.field("s", "x") == "x6x6x6",
    pc.field("b").isin([b"b1", b"b5"]),
]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_operation_matches_the_twin_with_plain_types(tmp_path: Any, layout: str) -> None:
    lh = lakehouse.open(str(tmp_path / "lh"))
    props = {"compaction.auto": "false"}
    if layout != "inlined":
        props["inline.max_rows"] = "0"
    pk = LAYOUTS[layout].get("primary_key")
    key = pk[0] if pk else "c"
    names = {"ns.v": VIEW, "ns.p": PLAIN}
    with lh.begin() as t:
        t.create_namespace("ns")
        for name, schema in names.items():
            t.create_table(name, schema, dict(props), **LAYOUTS[layout])

    versions: list[int] = []

    def step(op: Callable[[Any, str, pa.Schema], Any]) -> None:
        with lh.begin() as t:
            got = {name: op(t, name, schema) for name, schema in names.items()}
        assert got["ns.v"] == got["ns.p"]
        versions.append(lh.version)
        view, twin = lh.read("ns.v"), lh.read("ns.p")
        assert view.schema == VIEW
        same(view, twin)
        for where in WHERES:
            view = lh.read("ns.v", where=where)
            assert view.schema == VIEW
            same(view, lh.read("ns.p", where=where))
        batches = lh.scan_batches("ns.v", columns=["c", "s"], where="id >= 3").read_all()
        assert batches.schema == pa.schema([VIEW.field("c"), VIEW.field("s")])
        same(batches, lh.scan_batches("ns.p", columns=["c", "s"], where="id >= 3").read_all())

    step(lambda t, n, s: t.append(n, rows(list(range(1, 9)), s)))
    assert lh.table_stats("ns.v").inlined_rows == (8 if layout == "inlined" else 0)
    step(lambda t, n, s: t.delete(n, "id = 2"))
    step(lambda t, n, s: t.delete(n, "c = 'v4'"))
    step(lambda t, n, s: t.update(n, "id = 3", {"c": "'w3'"}))
    step(lambda t, n, s: t.update(n, "c = 'v5'", {"b": b"\x00new"}))
    step(lambda t, n, s: t.update(n, "id = 6", {"c": "upper(c)"}))
    step(lambda t, n, s: t.merge(n, rows([1, 9], s), on=[key]))
    # a source lacking columns: matched rows keep their b, s and l
    step(lambda t, n, s: t.merge(n, rows([7, 10], s).select(["id", key]), on=[key]))
    step(
        lambda t, n, s: t.merge(
            n, rows([8, 11], s), on=[key], when_matched="delete", when_not_matched="ignore"
        )
    )
    if not pk:  # two key columns: a bounding box plus exact membership
        step(lambda t, n, s: t.merge(n, rows([1, 12], s, "v"), on=["c", "b"]))
    step(lambda t, n, s: t.overwrite(n, rows([1], s, "o"), where="id = 1"))
    step(lambda t, n, s: t.append(n, rows(list(range(20, 26)), s)))
    step(lambda t, n, s: t.delete(n, "id = 21 OR c = 'v24'"))
    step(lambda t, n, s: t.compact(n).rows)
    if LAYOUTS[layout].get("partition_by"):
        step(lambda t, n, s: t.replace_partitions(n, rows([22, 30], s)))
        step(lambda t, n, s: t.compact(n).rows)
    else:  # replace_partitions on an unpartitioned table is overwrite
        step(lambda t, n, s: t.replace_partitions(n, rows([22, 30], s)))

    change_schema = pa.schema([*VIEW, ("_change_type", pa.string()), ("_version", pa.int64())])
    for start in (1, versions[3]):
        view = lh.changes("ns.v", start)
        assert view.schema == change_schema
        same(view, lh.changes("ns.p", start))
    for v in versions:
        view = lh.at_version(v).read("ns.v", where="c > 'v'")
        assert view.schema == VIEW
        same(view, lh.at_version(v).read("ns.p", where="c > 'v'"))
    assert lh.table_stats("ns.v").rows == lh.table_stats("ns.p").rows > 0
    lh.close()


def test_a_view_table_with_one_deleted_row_reads(tmp_path: Any) -> None:
    """The reported case: a delete, then every read of the table failed."""
    lh = lakehouse.open(str(tmp_path / "lh"))
    schema = pa.schema([("id", pa.int64()), ("c", SV)])
    with lh.begin() as t:
        t.create_namespace("ns")
        t.create_table("ns.t", schema, {"inline.max_rows": "0"})
        t.append("ns.t", pa.table({"id": [1, 2, 3], "c": pa.array(["a", "b", None], SV)}))
    with lh.begin() as t:
        assert t.delete("ns.t", "id = 2") == 1
    got = lh.read("ns.t")
    assert got.schema == schema
    assert got.to_pylist() == [{"id": 1, "c": "a"}, {"id": 3, "c": None}]
    lh.close()


def test_key_lookup_restore_and_clone_of_a_view_keyed_table(tmp_path: Any) -> None:
    lh = lakehouse.open(str(tmp_path / "lh"))
    schema = pa.schema([("id", pa.int64()), ("c", SV)])
    long = "c" * 20
    with lh.begin() as t:
        t.create_namespace("ns")
        t.create_table("ns.t", schema, {"inline.max_rows": "0"}, primary_key=["c"])
        t.append("ns.t", pa.table({"id": [1, 2, 3], "c": pa.array(["a", "b", long], SV)}))
    first = lh.version
    with lh.begin() as t:
        t.delete("ns.t", "id = 1")
        found = t.lookup_keys("ns.t", pa.table({"c": pa.array([long, "a", "b"], SV)}))
    assert found.schema.field("c").type == SV
    assert [(r["c"], r["position"]) for r in found.to_pylist()] == [(long, 2), ("b", 1)]
    with lh.begin() as t:
        t.restore_table("ns.t", first)
        t.clone_table("ns.t", "ns.u")
    for name in ("ns.t", "ns.u"):
        got = lh.read(name, where="c <> 'b'")
        assert got.schema == schema
        assert sorted(got.column("id").to_pylist()) == [1, 3]
    lh.close()


def test_merge_of_a_partial_source_keeps_nested_columns(tmp_path: Any) -> None:
    """Acero cannot carry a struct or list through a join: the matched target rows'
    nested values (which a partial source lacks) are taken, not joined."""
    lh = lakehouse.open(str(tmp_path / "lh"))
    schema = pa.schema(
        [("id", pa.int64()), ("v", pa.string()), ("s", pa.struct([("x", pa.int64())]))]
    )
    with lh.begin() as t:
        t.create_namespace("ns")
        t.create_table("ns.t", schema, {"inline.max_rows": "0"})
        t.append("ns.t", pa.table({"id": [1, 2], "v": ["a", "b"], "s": [{"x": 1}, None]}, schema))
    with lh.begin() as t:
        got = t.merge("ns.t", pa.table({"id": [2, 3], "v": ["B", "C"]}), on=["id"])
    assert (got.inserted, got.updated) == (1, 1)
    assert sorted(lh.read("ns.t").to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": "a", "s": {"x": 1}},
        {"id": 2, "v": "B", "s": None},
        {"id": 3, "v": "C", "s": None},
    ]
    lh.close()


# -- the helpers ---------------------------------------------------------------------------
NESTED = pa.schema(
    [
        ("k", SV),
        ("n", pa.int32()),
        ("s", pa.struct([("x", SV), ("y", pa.list_(BV))])),
        ("m", pa.map_(SV, BV)),
        ("d", pa.dictionary(pa.int32(), SV)),
    ]
)


def _nested() -> pa.Table:
    d = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, None, 0], pa.int32()), pa.array(["p", "q"], SV)
    )
    return pa.table(
        {
            "k": pa.array(["b", "a" * 20, None, "c"], SV),
            "n": pa.array([1, 2, 3, 4], pa.int32()),
            "s": pa.array(
                [{"x": "x", "y": [b"1"]}, None, {"x": None, "y": []}, {"x": "z" * 15, "y": None}],
                NESTED.field("s").type,
            ),
            "m": pa.array([[("k", b"v")], [], None, [("a", None)]], NESTED.field("m").type),
            "d": d,
        }
    )


def test_plain_type_replaces_every_nested_view_type() -> None:
    assert plain_type(SV) == pa.large_string() and plain_type(BV) == pa.large_binary()
    assert plain_type(pa.int64()) == pa.int64()
    for f in NESTED:
        assert "view" not in str(plain_type(f.type))
    t = _nested()
    assert plain(t).to_pylist() == t.to_pylist()
    assert plain(t).cast(NESTED).equals(t)
    plain_only = pa.table({"a": [1, 2]})
    assert plain(plain_only) is plain_only


def test_row_helpers_select_view_rows_keeping_the_schema() -> None:
    t = _nested()
    ref = plain(t)
    mask = pa.array([True, None, False, True])
    assert filter_rows(t, mask).schema == NESTED
    assert filter_rows(t, mask).to_pylist() == ref.filter(mask).to_pylist()
    idx = pa.array([3, 0, 0, None])
    assert take_rows(t, idx).schema == NESTED
    assert take_rows(t, idx).to_pylist() == ref.take(idx).to_pylist()
    col = t.column("s")
    assert take_rows(col, [2, 1]).type == col.type
    assert take_rows(col, [2, 1]).to_pylist() == [col[2].as_py(), col[1].as_py()]
    order = sort_indices(t.select(["k"]), sort_keys=[("k", "descending")])
    assert order.to_pylist() == [3, 0, 1, 2]  # nulls last
    batch = t.to_batches()[0]
    assert filter_rows(batch, mask).schema == NESTED


def test_join_on_a_view_key_keeps_each_sides_types() -> None:
    t = _nested()
    src = pa.table({"k": pa.array(["c", "b", "zz"], SV), "i": pa.array([0, 1, 2], pa.int64())})
    got = join(t, src, ["k"], "inner")
    assert got.schema == pa.schema([*NESTED, pa.field("i", pa.int64())])
    want = {("b", 1, 1), ("c", 4, 0)}
    assert {(r["k"], r["n"], r["i"]) for r in got.to_pylist()} == want
    by_k = {r["k"]: r for r in got.to_pylist()}
    assert by_k["c"]["s"] == {"x": "z" * 15, "y": None}
    left = join(t.select(["k", "n"]), src, ["k"], "left outer")
    assert sorted((r["n"], r["i"]) for r in left.to_pylist()) == [
        (1, 1),
        (2, None),
        (3, None),
        (4, 0),
    ]
    # a plain join keeps Arrow's own path
    a = pa.table({"k": [1, 2], "v": ["x", "y"]})
    b = pa.table({"k": [2], "w": [5]})
    assert join(a, b, "k", "inner").to_pylist() == [{"k": 2, "v": "y", "w": 5}]
