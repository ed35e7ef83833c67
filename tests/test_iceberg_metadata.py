"""``lakehouse.iceberg.write_metadata`` against real lakehouses (local and moto S3),
read back by pyiceberg's ``StaticTable``.

The oracle is the lakehouse itself: for every snapshot the metadata lists,
``StaticTable.from_metadata(location).scan(snapshot_id=u)`` returns exactly the
rows ``lh.at_version(u).read(table)`` returns (as a multiset, under the names of
version ``u``; Iceberg's wider types are cast back to the lakehouse's), and each
snapshot's sidecar holds exactly the files and deletion vectors of ``file_states``
at ``u`` (so the incremental computation is checked against a full read).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable

import lakehouse
from kvstore.objstore import MemoryStore
from lakehouse.data.table import file_key_id
from lakehouse.errors import NotFound, VersionExpired
from lakehouse.iceberg import paths, write_metadata
from lakehouse.iceberg.objects import fingerprint, has_field_ids
from lakehouse.iceberg.state import decode, load
from lakehouse.iceberg.writer import clear_cache

ORDERS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("status", pa.string()),
        ("qty", pa.int8()),
        ("total", pa.float64()),
    ]
)


def orders(ids: range | list[int], status: str = "open") -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": ids,
            "status": [status] * len(ids),
            "qty": [i % 100 for i in ids],
            "total": [i * 1.5 for i in ids],
        },
        schema=ORDERS,
    )


def normalised(t: pa.Table, like: pa.Schema) -> list[str]:
    """``t``'s rows as sorted JSON texts, its columns cast to ``like``'s types."""
    assert t.column_names == like.names, (t.column_names, like.names)
    if not t.schema.equals(like):
        t = t.cast(like)
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist())


def static(location: str, props: dict[str, str] | None = None) -> Any:
    return StaticTable.from_metadata(location, properties=props or {})


def check(
    lh: Any, table: str, location: str, props: dict[str, str] | None = None
) -> dict[str, Any]:
    """Every snapshot of the metadata at ``location`` reads as the lakehouse does at
    that version; returns the metadata JSON."""
    st = static(location, props)
    meta = st.metadata
    assert meta.snapshots, "no snapshot"
    for s in meta.snapshots:
        got = st.scan(snapshot_id=s.snapshot_id).to_arrow()
        with lh.at_version(s.snapshot_id) as view:
            want = view.read(table)
        assert normalised(got, want.schema) == normalised(want, want.schema), s.snapshot_id
    cur = meta.current_snapshot_id
    with lh.at_version(cur) as view:
        want = view.read(table)
    got = st.scan().to_arrow()
    assert normalised(got, want.schema) == normalised(want, want.schema)
    doc: dict[str, Any] = json.loads(read_bytes(lh, location))
    return doc


def read_bytes(lh: Any, location: str) -> bytes:
    if "://" not in location:
        return Path(location).read_bytes()
    import fsspec

    with fsspec.open(location, "rb", **lh.data_location()[1]) as f:
        return bytes(f.read())


def check_sidecars(lh: Any, table: str, doc: dict[str, Any]) -> None:
    """Each listed snapshot's sidecar holds the files and deletion vectors a full read
    of the table at that version gives."""
    root = lh._ctx.layout.iceberg_url
    store = lakehouse_store(lh)
    tid = doc["location"].rsplit("/", 1)[-1]
    chain = min(s["snapshot-id"] for s in doc["snapshots"])  # the first listed snapshot

    def get(u: int) -> Any:
        name = paths.state(tid, u, chain)
        return decode(store.get(name), name)

    for s in doc["snapshots"]:
        u = s["snapshot-id"]
        st = load(get, u)
        with lh.at_version(u) as view:
            full = {file_key_id(f): fingerprint(dv) for f, dv in view.file_states(table)}
        assert {fid: r.dv for fid, r in st.files.items()} == full, u
        assert st.snapshot == s and st.chain == chain
        for ref in st.files.values():
            assert ref.delete == "" or ref.delete.startswith(root)


def lakehouse_store(lh: Any) -> Any:
    from kvstore.objstore import open_store

    return open_store(lh._ctx.layout.iceberg_url, lh.data_location()[1])


def objects(lh: Any) -> set[str]:
    return set(lakehouse_store(lh).list(""))


@pytest.fixture
def lh(tmp_path: Path) -> Any:
    h = lakehouse.open(str(tmp_path / "lh"))
    with h.begin() as txn:
        txn.create_namespace("s")
    yield h
    h.close()


def create(
    lh: Any,
    name: str,
    schema: pa.Schema = ORDERS,
    properties: dict[str, str] | None = None,
    **kw: Any,
) -> None:
    """Create a table that the writer does not compact by itself (the versions are
    the test's)."""
    props = {"compaction.auto": "false", **(properties or {})}
    with lh.begin() as txn:
        txn.create_table(name, schema, props, **kw)


# -- rows ----------------------------------------------------------------------------------
def test_appends_deletes_updates_merge_overwrite_compaction(lh: Any) -> None:
    create(lh, "s.o", properties={"inline.max_rows": "0"})
    for i in range(3):
        lh.append("s.o", orders(range(i * 10, i * 10 + 10)))
    lh.delete("s.o", "id % 7 = 0")  # deletion vectors in three files
    lh.delete("s.o", "id % 5 = 1")  # adds to existing deletion vectors
    lh.update("s.o", "id < 4", {"status": "'done'"})
    with lh.begin() as txn:
        txn.merge("s.o", orders([2, 3, 40, 41], "merged"), on="id")
    lh.overwrite("s.o", orders(range(100, 103)), where="id >= 25")
    with lh.begin() as txn:
        txn.compact("s.o")
    lh.append("s.o", orders([500]))
    doc = check(lh, "s.o", write_metadata(lh, "s.o"))
    check_sidecars(lh, "s.o", doc)
    ops = [s["summary"]["operation"] for s in doc["snapshots"]]
    labels = [s["summary"]["lakehouse.operation"] for s in doc["snapshots"]]
    assert ops[:5] == ["append", "append", "append", "append", "delete"]
    assert labels[0] == "create" and labels[-2:] == ["compact", "append"]
    ids = [s["snapshot-id"] for s in doc["snapshots"]]
    assert ids == sorted(ids) and ids[-1] == lh.version
    assert all(s["sequence-number"] == s["snapshot-id"] for s in doc["snapshots"])
    assert [s.get("parent-snapshot-id") for s in doc["snapshots"]] == [None, *ids[:-1]]
    last = doc["snapshots"][-1]["summary"]
    assert (
        int(last["total-records"]) - int(last["total-position-deletes"]) == lh.read("s.o").num_rows
    )
    compact = doc["snapshots"][-2]["summary"]
    assert compact["operation"] == "overwrite" and int(compact["deleted-data-files"]) >= 3
    assert doc["format-version"] == 2
    assert doc["table-uuid"] == str(uuid.UUID(hex=lh.describe_table("s.o").table_id))


def test_restore_clone_replace_partitions_and_two_tables_in_one_version(lh: Any) -> None:
    create(lh, "s.o", properties={"inline.max_rows": "0"})
    create(lh, "s.p", properties={"inline.max_rows": "0"}, partition_by=["status"])
    lh.append("s.o", orders(range(6)))
    v = lh.version
    lh.delete("s.o", "id = 1")
    with lh.begin() as txn:  # one version changes both tables
        txn.delete("s.o", "id = 2")
        txn.append("s.p", orders(range(4), "a"))
        txn.append("s.p", orders(range(4, 6), "b"))
    with lh.begin() as txn:
        txn.clone_table("s.o", "s.c")
        txn.restore_table("s.o", v)  # the file back without its deletion vector
    lh.replace_partitions("s.p", orders([9], "a"))
    lh.delete("s.c", "id = 3")
    for t in ("s.o", "s.p", "s.c"):
        doc = check(lh, t, write_metadata(lh, t))
        check_sidecars(lh, t, doc)
    labels = [s["summary"]["lakehouse.operation"] for s in doc["snapshots"]]
    assert labels[0].startswith("create")


def test_positional_delete_files_are_written_once_per_deletion_vector(lh: Any) -> None:
    create(lh, "s.o", properties={"inline.max_rows": "0"})
    lh.append("s.o", orders(range(10)))
    lh.append("s.o", orders(range(10, 20)))
    lh.delete("s.o", "id = 3")
    lh.delete("s.o", "id = 4")  # same file: a new delete file, the old one DELETED
    lh.delete("s.o", "id = 15")  # the other file: the first file's delete file is reused
    doc = check(lh, "s.o", write_metadata(lh, "s.o"))
    tid = lh.describe_table("s.o").table_id
    deletes = sorted(n for n in objects(lh) if n.startswith(f"{tid}/deletes/"))
    assert len(deletes) == 3
    entries = static(write_metadata(lh, "s.o")).inspect.entries().to_pylist()
    live = [e["data_file"]["content"] for e in entries if e["status"] != 2]
    assert sorted(live) == [0, 0, 1, 1]  # two data files, each with its delete file
    st = static(write_metadata(lh, "s.o"))
    tasks = list(st.scan().plan_files())
    assert sorted(len(t.delete_files) for t in tasks) == [1, 1]
    assert doc["snapshots"][-1]["summary"]["total-position-deletes"] == "3"


def test_inlined_rows_are_materialised_once_per_batch(lh: Any) -> None:
    create(lh, "s.o")  # small appends are inlined by default
    lh.append("s.o", orders(range(5)))
    lh.append("s.o", orders(range(5, 8)))
    assert lh.table_stats("s.o").inlined_rows == 8
    lh.delete("s.o", "id = 6")
    loc = write_metadata(lh, "s.o")
    check(lh, "s.o", loc)
    tid = lh.describe_table("s.o").table_id
    mat = {n for n in objects(lh) if n.startswith(f"{tid}/data/")}
    assert len(mat) == 2
    lh.append("s.o", orders([9]))
    check(lh, "s.o", write_metadata(lh, "s.o"))
    assert len({n for n in objects(lh) if n.startswith(f"{tid}/data/")}) == 3


def test_many_versions_merge_small_manifests(lh: Any) -> None:
    from lakehouse.iceberg.objects import MAX_MANIFESTS

    create(lh, "s.o", properties={"inline.max_rows": "0"})
    for i in range(MAX_MANIFESTS + 10):
        lh.append("s.o", orders([i]))
        if i % 40 == 39:
            lh.delete("s.o", f"id = {i - 3}")
    loc = write_metadata(lh, "s.o")
    doc = check(lh, "s.o", loc)
    check_sidecars(lh, "s.o", doc)
    st = static(loc)
    manifests = st.current_snapshot().manifests(st.io)
    assert len(manifests) <= MAX_MANIFESTS
    assert sum(m.existing_files_count or 0 for m in manifests) > 0  # merged entries


def test_nested_columns_in_inlined_and_stored_files(lh: Any) -> None:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("s", pa.struct([("a", pa.int32()), ("b", pa.string())])),
            ("l", pa.list_(pa.int64())),
            ("m", pa.map_(pa.string(), pa.float64())),
        ]
    )
    rows = pa.table(
        {
            "id": [1, 2, 3],
            "s": [{"a": 1, "b": "x"}, None, {"a": 3, "b": None}],
            "l": [[1, 2], [], None],
            "m": [[("k", 1.0)], None, [("z", 2.5), ("y", 0.5)]],
        },
        schema=schema,
    )
    create(lh, "s.n", schema, properties={"inline.max_rows": "3"})
    lh.append("s.n", rows)  # inlined
    lh.append("s.n", pa.concat_tables([rows, rows]))  # stored
    lh.delete("s.n", "id = 2")
    doc = check(lh, "s.n", write_metadata(lh, "s.n"))
    fields = {f["name"]: f for f in doc["schemas"][-1]["fields"]}
    assert fields["s"]["type"]["type"] == "struct" and fields["l"]["type"]["type"] == "list"


def test_types_readers_refuse_in_a_file_are_materialised_readable(lh: Any) -> None:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("u", pa.uint64()),  # omitted from the Iceberg schema
            ("t", pa.time32("ms")),  # pyiceberg reads time64[us] only
            ("ts", pa.timestamp("us", "Europe/Amsterdam")),  # and UTC only
            ("tn", pa.timestamp("ns")),  # omitted
            ("fx", pa.binary(3)),
            ("u32", pa.uint32()),
        ]
    )
    rows = pa.table(
        {
            "id": [1, 2],
            "u": [1, 2**63],
            "t": [dt.time(1, 2, 3), None],
            "ts": [dt.datetime(2024, 1, 1, tzinfo=dt.UTC), None],
            "tn": [1, 2],
            "fx": [b"abc", b"def"],
            "u32": [5, 2**32 - 1],
        },
        schema=schema,
    )
    create(lh, "s.x", schema)
    lh.append("s.x", rows)  # inlined
    with lh.begin() as txn:
        txn.alter_table("s.x", set_properties={"inline.max_rows": "0"})
    lh.append("s.x", rows)  # stored
    lh.delete("s.x", "id = 2")
    loc = write_metadata(lh, "s.x")
    st = static(loc)
    assert st.metadata.properties["lakehouse.iceberg.omitted-columns"] == "u,tn"
    for s in st.metadata.snapshots:
        got = st.scan(snapshot_id=s.snapshot_id).to_arrow()
        want = lh.at_version(s.snapshot_id).read("s.x", columns=["id", "t", "ts", "fx", "u32"])
        assert normalised(got, want.schema) == normalised(want, want.schema)
    assert st.scan().to_arrow().num_rows == 2


# -- definitions -----------------------------------------------------------------------------
def test_schema_evolution_keeps_each_snapshots_schema(lh: Any) -> None:
    narrow = pa.schema(
        [pa.field("k", pa.int32(), nullable=False), ("x", pa.float32()), ("y", pa.string())]
    )
    create(lh, "s.ev", narrow, properties={"inline.max_rows": "0"})
    lh.append("s.ev", pa.table({"k": [1, 2], "x": [1.5, 2.5], "y": ["a", "b"]}, schema=narrow))
    wide = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("x", pa.float64()), ("z", pa.bool_())]
    )
    with lh.begin() as txn:
        txn.alter_table("s.ev", schema=wide)  # widen k and x, drop y, add z
    with lh.begin() as txn:
        txn.alter_table("s.ev", rename_columns={"x": "amount"})
        txn.append("s.ev", pa.table({"k": [3], "amount": [3.5], "z": [True]}))
    lh.delete("s.ev", "k = 1")
    doc = check(lh, "s.ev", write_metadata(lh, "s.ev"))
    check_sidecars(lh, "s.ev", doc)
    by_id = {s["schema-id"]: s for s in doc["schemas"]}
    names = [[f["name"] for f in by_id[s["schema-id"]]["fields"]] for s in doc["snapshots"]]
    assert names[1] == ["k", "x", "y"] and names[-1] == ["k", "amount", "z"]
    cur = by_id[doc["current-schema-id"]]
    assert [(f["id"], f["type"]) for f in cur["fields"]] == [
        (1, "long"),
        (2, "double"),
        (4, "boolean"),
    ]
    mapping = json.loads(doc["properties"]["schema.name-mapping.default"])
    assert {m["field-id"]: set(m["names"]) for m in mapping}[2] == {"x", "amount"}
    assert doc["last-column-id"] >= 4


def test_files_written_while_the_schema_had_parquet_field_ids_are_materialised(
    lh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.parquet as pq

    from lakehouse import model

    # The lakehouse now drops PARQUET:field_id from table schemas (create/alter)
    # and from every file it writes; a table created before that kept them in its
    # definition and its files. Act as that code: the strip does nothing.
    monkeypatch.setattr(model, "without_field_ids", lambda schema: schema)
    ids = [b"2", b"1", b"7"]  # another Iceberg table's ids: a and b swapped vs ours
    sch = pa.schema(
        [
            pa.field("a", pa.int64(), metadata={b"PARQUET:field_id": ids[0]}),
            pa.field("b", pa.int64(), metadata={b"PARQUET:field_id": ids[1]}),
            pa.field(
                "s",
                pa.struct([pa.field("x", pa.string(), metadata={b"PARQUET:field_id": b"9"})]),
                metadata={b"PARQUET:field_id": ids[2]},
            ),
        ]
    )
    create(lh, "s.f", sch, {"inline.max_rows": "0"})
    rows = {"a": [1, 2], "b": [10, 20], "s": [{"x": "p"}, None]}
    lh.append("s.f", pa.table(rows, schema=sch))
    monkeypatch.undo()
    (f,) = lh.list_data_files("s.f")
    written = pq.read_schema(f"{lh.data_location()[0].removeprefix('file://')}/{f.path}")
    assert written.field("a").metadata[b"PARQUET:field_id"] == b"2"  # the case at hand
    assert lh.describe_table("s.f").schema.field("a").metadata  # kept in the definition
    lh.append("s.f", pa.table({"a": [3], "b": [30], "s": [{"x": "q"}]}, schema=sch))
    lh.delete("s.f", "a = 2")
    with lh.begin() as txn:  # today's alter drops them from the definition
        txn.alter_table(
            "s.f", schema=lh.describe_table("s.f").schema.append(pa.field("c", pa.int8()))
        )
    assert not has_field_ids(lh.describe_table("s.f"))
    lh.append("s.f", pa.table({"a": [4], "b": [40], "s": [None], "c": [1]}))
    loc = write_metadata(lh, "s.f")
    doc = check(lh, "s.f", loc)  # every snapshot reads a, b, s as the lakehouse does
    check_sidecars(lh, "s.f", doc)
    got = static(loc).scan(snapshot_id=doc["snapshots"][1]["snapshot-id"]).to_arrow()
    assert sorted(got.select(["a", "b"]).to_pylist(), key=str) == [
        {"a": 1, "b": 10},
        {"a": 2, "b": 20},
    ]
    tid = doc["location"].rsplit("/", 1)[-1]
    copies = {n for n in objects(lh) if n.startswith(f"{tid}/data/")}
    assert len(copies) == 2  # the two files written with ids, not the one after the alter


def test_a_column_name_reused_after_a_drop_materialises_the_old_files(lh: Any) -> None:
    schema = pa.schema([("id", pa.int64()), ("a", pa.string())])
    create(lh, "s.r", schema, properties={"inline.max_rows": "0"})
    lh.append("s.r", pa.table({"id": [1, 2], "a": ["old1", "old2"]}))
    lh.delete("s.r", "id = 2")
    first_v = lh.version
    old_loc = write_metadata(lh, "s.r")  # before the name moves
    with lh.begin() as txn:  # drop a, then add a new a (a new id)
        txn.alter_table("s.r", schema=pa.schema([("id", pa.int64())]))
    with lh.begin() as txn:
        txn.alter_table("s.r", schema=pa.schema([("id", pa.int64()), ("a", pa.int32())]))
    lh.append(
        "s.r",
        pa.table({"id": [3], "a": [7]}, schema=pa.schema([("id", pa.int64()), ("a", pa.int32())])),
    )
    loc = write_metadata(lh, "s.r")
    doc = check(lh, "s.r", loc)  # the snapshots before the name moved too
    before = [s for s in doc["snapshots"] if s["snapshot-id"] <= first_v]
    assert before and all("-g" in s["manifest-list"] for s in before[1:])
    st = static(loc)
    assert st.scan().to_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "a": None},
        {"id": 3, "a": 7},
    ]
    tid = lh.describe_table("s.r").table_id
    assert {n for n in objects(lh) if n.startswith(f"{tid}/data/")}  # materialised
    mapping = json.loads(doc["properties"]["schema.name-mapping.default"])
    assert [m["field-id"] for m in mapping if "a" in m["names"]] == [3]
    check(lh, "s.r", old_loc)  # the metadata written before is still right
    clear_cache()  # a fresh process finds the remapped objects
    seen = objects(lh)
    assert write_metadata(lh, "s.r") == loc and objects(lh) == seen


def test_partitioned_table_with_several_transforms(lh: Any) -> None:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("country", pa.string()),
            ("ts", pa.timestamp("us", "UTC")),
            ("d", pa.date32()),
            ("sku", pa.string()),
            ("amount", pa.decimal128(10, 2)),
        ]
    )
    create(
        lh,
        "s.p",
        schema,
        properties={"inline.max_rows": "0"},
        partition_by=["country", "day(ts)", "bucket(4, id)", "truncate(2, sku)", "month(d)"],
    )
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    rows = pa.table(
        {
            "id": list(range(12)),
            "country": ["NL", "DE", None] * 4,
            "ts": [base + dt.timedelta(hours=7 * i) for i in range(12)],
            "d": [dt.date(2024, 1 + i % 3, 5) for i in range(12)],
            "sku": [f"sk{i % 4}x" for i in range(12)],
            "amount": [Decimal(f"{i}.25") for i in range(12)],
        },
        schema=schema,
    )
    lh.append("s.p", rows)
    lh.delete("s.p", "id % 4 = 0")
    with lh.begin() as txn:
        txn.alter_table("s.p", partition_by=["year(ts)"])
    lh.append("s.p", rows.slice(0, 3))
    loc = write_metadata(lh, "s.p")
    doc = check(lh, "s.p", loc)
    check_sidecars(lh, "s.p", doc)
    specs = {s["spec-id"]: s for s in doc["partition-specs"]}
    assert [f["transform"] for f in specs[0]["fields"]] == [
        "identity",
        "day",
        "bucket[4]",
        "truncate[2]",
        "month",
    ]
    assert doc["default-spec-id"] == 1 and doc["last-partition-id"] >= 1005
    st = static(loc)
    files = [t.file for t in st.scan().plan_files()]
    assert {f.spec_id for f in files} == {0, 1}
    nl = [f for f in files if f.spec_id == 0 and f.partition[0] == "NL"]
    assert nl and all(f.partition[3] == "sk" for f in nl)
    got = st.scan(row_filter="country = 'NL'").to_arrow()
    assert sorted(got["id"].to_pylist()) == sorted(
        lh.read("s.p", where="country = 'NL'")["id"].to_pylist()
    )


def test_sort_keys_become_the_default_sort_order(lh: Any) -> None:
    create(lh, "s.sorted", sort_keys=["status", "id"])
    lh.append("s.sorted", orders(range(3)))
    doc = check(lh, "s.sorted", write_metadata(lh, "s.sorted"))
    assert doc["default-sort-order-id"] == 1
    order = next(o for o in doc["sort-orders"] if o["order-id"] == 1)
    assert [(f["source-id"], f["direction"], f["null-order"]) for f in order["fields"]] == [
        (2, "asc", "nulls-first"),
        (1, "asc", "nulls-first"),
    ]


# -- history ---------------------------------------------------------------------------------
def test_rollback_is_a_snapshot_and_time_travel_to_any_version(lh: Any) -> None:
    create(lh, "s.o", properties={"inline.max_rows": "0"})
    created = lh.version
    lh.append("s.o", orders(range(5)))
    v = lh.version
    lh.delete("s.o", "id < 3")
    lh.append("s.o", orders(range(10, 12)))
    create(lh, "s.other")  # not a snapshot of s.o
    lh.rollback(v)
    lh.append("s.o", orders([99]))
    doc = check(lh, "s.o", write_metadata(lh, "s.o"))
    check_sidecars(lh, "s.o", doc)
    snaps = [s["snapshot-id"] for s in doc["snapshots"]]
    assert lh.version - 1 in snaps and lh.version - 2 not in snaps
    rb = next(s for s in doc["snapshots"] if s["snapshot-id"] == lh.version - 1)
    assert rb["summary"]["lakehouse.operation"] == "rollback"
    for u in range(created, lh.version + 1):  # every version, by version
        loc = write_metadata(lh, "s.o", version=u)
        meta = static(loc).metadata
        assert meta.current_snapshot_id == max(s for s in snaps if s <= u)
        want = lh.at_version(u).read("s.o")
        assert normalised(static(loc).scan().to_arrow(), want.schema) == normalised(
            want, want.schema
        )


def test_expire_versions_starts_the_history_at_the_new_oldest_version(lh: Any) -> None:
    create(lh, "s.o", properties={"inline.max_rows": "0"})
    for i in range(5):
        lh.append("s.o", orders(range(i * 3, i * 3 + 3)))
    lh.delete("s.o", "id = 4")
    before = write_metadata(lh, "s.o")
    lh.append("s.o", orders([50]))
    lh.expire_versions(keep_last=3)
    oldest = lh.oldest_version
    loc = write_metadata(lh, "s.o")
    assert loc != before and loc.endswith(f"-{oldest:020d}.metadata.json")
    doc = check(lh, "s.o", loc)
    snaps = [s["snapshot-id"] for s in doc["snapshots"]]
    assert snaps[0] == oldest and min(snaps) == oldest
    with pytest.raises(VersionExpired):
        write_metadata(lh, "s.o", version=oldest - 1)
    clear_cache()  # a fresh process: the same objects
    assert write_metadata(lh, "s.o") == loc
    # expiry to a version that did not change the table: a first snapshot of its own
    for _ in range(3):
        create(lh, f"s.x{lh.version}")
    lh.expire_versions(keep_last=2)
    oldest = lh.oldest_version
    doc = check(lh, "s.o", write_metadata(lh, "s.o"))
    assert [s["snapshot-id"] for s in doc["snapshots"]] == [oldest]
    assert "parent-snapshot-id" not in doc["snapshots"][0]
    assert doc["snapshots"][0]["summary"]["added-data-files"] == str(len(lh.list_data_files("s.o")))


def test_a_process_that_wrote_metadata_writes_it_again_after_an_expiry(lh: Any) -> None:
    create(lh, "s.o", properties={"inline.max_rows": "0"})
    for i in range(3):
        lh.append("s.o", orders(range(i * 3, i * 3 + 3)))
    write_metadata(lh, "s.o")  # this process now knows the records up to here
    for i in range(3, 10):
        lh.append("s.o", orders([i * 10]))
        if i % 3 == 0:
            lh.delete("s.o", f"id = {i * 10}")
    lh.expire_versions(keep_last=3)  # the records after the ones known are gone too
    oldest = lh.oldest_version
    for _ in range(2):
        loc = write_metadata(lh, "s.o")
        assert loc.endswith(f"-{oldest:020d}.metadata.json")
        doc = check(lh, "s.o", loc)
        check_sidecars(lh, "s.o", doc)
        assert doc["snapshots"][0]["snapshot-id"] == oldest
    check(lh, "s.o", write_metadata(lh, "s.o", version=oldest))
    with pytest.raises(VersionExpired):
        write_metadata(lh, "s.o", version=oldest - 1)
    lh.append("s.o", orders([999]))
    check(lh, "s.o", write_metadata(lh, "s.o"))


def test_a_server_that_served_a_table_serves_it_after_an_expiry(lh: Any) -> None:
    import requests

    from lakehouse.iceberg import Server

    create(lh, "s.o")
    for i in range(4):
        lh.append("s.o", orders([i]))
    with Server(lh.url) as s:  # its own reader
        url = f"{s.url}/v1/namespaces/s/tables/o"
        assert requests.get(url, timeout=60).status_code == 200
        for i in range(10):
            lh.append("s.o", orders([100 + i]))
        lh.expire_versions(keep_last=3)
        lh.append("s.o", orders([99]))
        for _ in range(2):
            r = requests.get(url, timeout=60)
            assert r.status_code == 200, r.text
            loc = r.json()["metadata-location"]
            assert loc.endswith(f"-{lh.oldest_version:020d}.metadata.json")
            check(lh, "s.o", loc)


def test_metadata_and_the_rest_catalog_while_a_writer_appends_deletes_and_expires(
    lh: Any, tmp_path: Path
) -> None:
    """Readers of the metadata race a writer that expires all but 5 versions every
    few commits: every call returns metadata, or VersionExpired for a version that
    did expire (no other error, no HTTP 500)."""
    import threading

    import requests

    from lakehouse.iceberg import Server

    create(lh, "s.o", properties={"inline.max_rows": "0"})
    lh.append("s.o", orders([0]))
    done = threading.Event()
    errors: list[BaseException] = []
    calls = {"ok": 0, "expired": 0}
    statuses: list[tuple[int, str]] = []
    lock = threading.Lock()

    def writer() -> None:
        try:
            for i in range(1, 91):
                lh.append("s.o", orders([i]))
                if i % 7 == 0:
                    lh.delete("s.o", f"id = {i - 3}")
                if i % 10 == 0:
                    lh.expire_versions(keep_last=5)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def metadata_calls(h: Any) -> None:
        try:
            while not done.is_set():
                v = h.version
                try:
                    write_metadata(h, "s.o", version=v)
                    with lock:
                        calls["ok"] += 1
                except VersionExpired:
                    assert v < lh.oldest_version  # it did expire
                    with lock:
                        calls["expired"] += 1
        except BaseException as exc:
            errors.append(exc)

    def rest_calls(url: str) -> None:
        try:
            while not done.is_set():
                r = requests.get(f"{url}/v1/namespaces/s/tables/o", timeout=120)
                with lock:
                    statuses.append((r.status_code, r.text[:200]))
        except BaseException as exc:
            errors.append(exc)

    with lakehouse.open_reader(str(tmp_path / "lh")) as reader, Server(lh.url) as s:
        threads = [
            threading.Thread(target=writer),
            threading.Thread(target=metadata_calls, args=(lh,)),
            threading.Thread(target=metadata_calls, args=(reader,)),
            threading.Thread(target=rest_calls, args=(s.url,)),
            threading.Thread(target=rest_calls, args=(s.url,)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        # a load whose latest version expired while it waited starts again at the new
        # latest (catalog.LOAD_ATTEMPTS times): a 404 only if it lost that race each time
        assert all(c == 200 or (c == 404 and "has expired" in m) for c, m in statuses), [
            x for x in statuses if x[0] != 200
        ]
        assert calls["ok"] > 0 and [c for c, _ in statuses].count(200) > 0
        r = requests.get(f"{s.url}/v1/namespaces/s/tables/o", timeout=120)
        assert r.status_code == 200, r.text
        check(lh, "s.o", r.json()["metadata-location"])
    doc = check(lh, "s.o", write_metadata(lh, "s.o"))
    check_sidecars(lh, "s.o", doc)
    assert doc["snapshots"][0]["snapshot-id"] == lh.oldest_version


def test_dropped_and_recreated_table_is_a_new_iceberg_table(lh: Any) -> None:
    create(lh, "s.o")
    lh.append("s.o", orders(range(3)))
    first = write_metadata(lh, "s.o")
    with lh.begin() as txn:
        txn.drop_table("s.o")
    create(lh, "s.o")
    lh.append("s.o", orders([7]))
    loc = write_metadata(lh, "s.o")
    doc = check(lh, "s.o", loc)
    assert doc["table-uuid"] != json.loads(read_bytes(lh, first))["table-uuid"]
    assert doc["snapshots"][0]["snapshot-id"] == lh.version - 1


# -- found again -------------------------------------------------------------------------------
def test_second_call_and_second_process_find_the_same_objects(lh: Any, tmp_path: Path) -> None:
    create(lh, "s.o")
    for i in range(3):
        lh.append("s.o", orders(range(i * 4, i * 4 + 4)))
    lh.delete("s.o", "id = 5")
    loc = write_metadata(lh, "s.o")
    seen = objects(lh)
    assert write_metadata(lh, "s.o") == loc
    assert write_metadata(lh, "s.o", version=lh.version) == loc
    clear_cache()
    with lakehouse.open_reader(str(tmp_path / "lh")) as reader:
        assert write_metadata(reader, "s.o") == loc
    code = (
        "import sys, lakehouse; from lakehouse.iceberg import write_metadata\n"
        "r = lakehouse.open_reader(sys.argv[1]); print(write_metadata(r, 's.o'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "lh")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ},
    )
    assert out.stdout.strip() == loc
    assert objects(lh) == seen  # nothing new written
    # one more version, written by a fresh process from the stored sidecars
    lh.append("s.o", orders([77]))
    clear_cache()
    check(lh, "s.o", write_metadata(lh, "s.o"))


def test_bad_input(lh: Any, tmp_path: Path) -> None:
    create(lh, "s.o")
    with pytest.raises(NotFound):
        write_metadata(lh, "s.missing")
    with pytest.raises(NotFound):
        write_metadata(lh, "nope.t")
    with pytest.raises(NotFound):
        write_metadata(lh, "s.o", version=lh.version + 5)
    with pytest.raises(TypeError):
        write_metadata(object(), "s.o")
    with lakehouse.open(MemoryStore()) as inst:
        with inst.begin() as txn:
            txn.create_namespace("s")
            txn.create_table("s.o", ORDERS)
        with pytest.raises(ValueError, match="store instance"):
            write_metadata(inst, "s.o")


# -- S3 ----------------------------------------------------------------------------------------
@pytest.mark.s3
def test_s3_lakehouse(s3_url: tuple[str, dict[str, Any]], moto_endpoint: str) -> None:
    url, opts = s3_url
    with lakehouse.open(url, storage_options=opts) as h:
        with h.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(
                "s.o", ORDERS, properties={"inline.max_rows": "2", "compaction.auto": "false"}
            )
        h.append("s.o", orders(range(10)))
        h.append("s.o", orders([20]))  # inlined
        h.delete("s.o", "id = 3")
        loc = write_metadata(h, "s.o")
        assert loc.startswith("s3://") and loc.endswith(".metadata.json")
        props = {
            "s3.endpoint": moto_endpoint,
            "s3.access-key-id": "testing",
            "s3.secret-access-key": "testing",
            "s3.region": "us-east-1",
        }
        doc = check(h, "s.o", loc, props)
        assert all(s["manifest-list"].startswith("s3://") for s in doc["snapshots"])
        check_sidecars(h, "s.o", doc)
        seen = objects(h)
        clear_cache()
        assert write_metadata(h, "s.o") == loc
        assert objects(h) == seen


def test_an_object_written_differently_by_another_writer_starts_the_call_again(
    lh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakehouse.iceberg import objects, writer

    store = MemoryStore()
    objects.put(store, "x", b"1")
    objects.put(store, "x", b"1")  # the same bytes: a concurrent writer of the same object
    with pytest.raises(objects.ObjectConflict):
        objects.put(store, "x", b"2")
    create(lh, "s.o")
    lh.append("s.o", orders(range(3)))
    real = writer._Run.write
    calls: list[int] = []

    def once(self: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise objects.ObjectConflict("snap-x")
        return real(self)

    monkeypatch.setattr(writer._Run, "write", once)
    loc = write_metadata(lh, "s.o")
    assert len(calls) == 2
    check(lh, "s.o", loc)
