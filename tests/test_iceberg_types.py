"""lakehouse/iceberg/types.py (typemap.py, mapping.py): the table model as Iceberg v2 JSON.

Cell by cell (Arrow type -> Iceberg type, readable types), and checked against
pyiceberg 0.12, which parses every JSON value produced here; name mappings and
field ids come from real lakehouses and real Parquet files. Bounds and metrics:
test_iceberg_bounds.py; partition specs, records and sort orders:
test_iceberg_partitions.py.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from iceberg_fixtures import FILES_ONLY, data_file_path, lakehouse_with_namespace
from pyiceberg.io.pyarrow import UnsupportedPyArrowTypeException, pyarrow_to_schema
from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import parse_mapping_from_json

import lakehouse
from lakehouse.iceberg import types as it
from lakehouse.model import Column, DataFile, assign_columns

UTC = dt.UTC


# -- Arrow type -> Iceberg type -------------------------------------------------------------
TYPES: list[tuple[pa.DataType, str | None]] = [
    (pa.bool_(), "boolean"),
    (pa.int8(), "int"),
    (pa.int16(), "int"),
    (pa.int32(), "int"),
    (pa.int64(), "long"),
    (pa.uint8(), "int"),
    (pa.uint16(), "int"),
    (pa.uint32(), "long"),
    (pa.uint64(), None),
    (pa.float16(), None),
    (pa.float32(), "float"),
    (pa.float64(), "double"),
    (pa.decimal128(9, 2), "decimal(9, 2)"),
    (pa.decimal128(38, 0), "decimal(38, 0)"),
    (pa.decimal256(20, 2), None),
    (pa.decimal256(40, 2), None),
    (pa.date32(), "date"),
    (pa.date64(), "date"),
    (pa.time32("s"), "time"),
    (pa.time32("ms"), "time"),
    (pa.time64("us"), "time"),
    (pa.time64("ns"), None),
    (pa.timestamp("s"), "timestamp"),
    (pa.timestamp("ms"), "timestamp"),
    (pa.timestamp("us"), "timestamp"),
    (pa.timestamp("ns"), None),
    (pa.timestamp("us", "UTC"), "timestamptz"),
    (pa.timestamp("ms", "Europe/Amsterdam"), "timestamptz"),
    (pa.timestamp("ns", "UTC"), None),
    (pa.string(), "string"),
    (pa.large_string(), "string"),
    (pa.string_view(), "string"),
    (pa.binary(), "binary"),
    (pa.large_binary(), "binary"),
    (pa.binary_view(), "binary"),
    (pa.binary(16), "fixed[16]"),
    (pa.duration("us"), None),
    (pa.month_day_nano_interval(), None),
    (pa.dictionary(pa.int32(), pa.string()), None),
    (pa.null(), None),
    (pa.uuid(), None),
]


@pytest.mark.parametrize(("arrow", "iceberg"), TYPES, ids=[str(t) for t, _ in TYPES])
def test_primitive_type(arrow: pa.DataType, iceberg: str | None) -> None:
    assert it.primitive_type(arrow) == iceberg
    if iceberg is None:
        with pytest.raises(it.UnsupportedColumn, match="'c'"):
            it.column_type(1, arrow, "c")
        return
    assert it.column_type(1, arrow, "c") == iceberg
    parsed = Schema.model_validate(
        {"type": "struct", "schema-id": 0, "fields": [_field(1, "c", iceberg)]}
    )
    assert str(parsed.find_type(1)) == iceberg


def _field(fid: int, name: str, typ: Any, required: bool = False) -> dict[str, Any]:
    return {"id": fid, "name": name, "required": required, "type": typ}


NESTED = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        (
            "s",
            pa.struct(
                [
                    pa.field("a", pa.int32(), nullable=False),
                    ("l", pa.list_(pa.struct([("x", pa.string()), ("y", pa.float64())]))),
                    ("m", pa.map_(pa.string(), pa.list_(pa.int64()))),
                ]
            ),
        ),
        ("ll", pa.large_list(pa.field("item", pa.date32(), nullable=False))),
        ("bad", pa.struct([("u", pa.uint64())])),
        ("fl", pa.list_(pa.int32(), 3)),
    ]
)


def test_nested_schema_ids_and_pyiceberg() -> None:
    cols, _ = assign_columns(NESTED)
    schema, omitted, last = it.iceberg_schema(cols, NESTED)
    assert omitted == ["bad", "fl"]
    n = it.nested_id
    parsed = Schema.model_validate({**schema, "schema-id": it.schema_id(schema)})
    # pre-order: s.a, s.l, s.l.element, s.l.element.x, s.l.element.y, s.m, key, value, element
    expect = {
        "s.a": n(2, 1),
        "s.l": n(2, 2),
        "s.l.element": n(2, 3),
        "s.l.element.x": n(2, 4),
        "s.l.element.y": n(2, 5),
        "s.m": n(2, 6),
        "s.m.key": n(2, 7),
        "s.m.value": n(2, 8),
        "s.m.value.element": n(2, 9),
        "ll.element": n(3, 1),
    }
    for path, fid in expect.items():
        assert parsed.find_field(path).field_id == fid, path
    assert n(2, 1) == it.NESTED_BASE + 2 * it.NESTED_SPAN + 1
    assert last == max(expect.values()) == parsed.highest_field_id
    assert parsed.find_field("id").required and parsed.find_field("s.a").required
    assert parsed.find_field("ll").field_type.element_required  # type: ignore[attr-defined]
    assert not parsed.find_field("s.l").field_type.element_required  # type: ignore[attr-defined]
    assert str(parsed.find_type("s.m")) == "map<string, list<long>>"


def test_unsupported_nested_columns() -> None:
    wide = pa.struct([(f"f{i}", pa.int32()) for i in range(it.NESTED_SPAN)])
    with pytest.raises(it.UnsupportedColumn, match="4096 nested fields"):
        it.column_type(1, wide, "w")
    ok = pa.struct([(f"f{i}", pa.int32()) for i in range(it.NESTED_SPAN - 1)])
    assert it.column_type(1, ok)["fields"][-1]["id"] == it.nested_id(1, it.NESTED_SPAN - 1)  # type: ignore[index]
    big = it.MAX_NESTED_COLUMN_ID
    assert (
        it.nested_id(big + 1, it.NESTED_SPAN - 1)
        > it.RESERVED_IDS
        >= it.nested_id(big, it.NESTED_SPAN - 1)
    )
    it.column_type(big, pa.list_(pa.int32()))
    with pytest.raises(it.UnsupportedColumn, match="id"):
        it.column_type(big + 1, pa.list_(pa.int32()))
    with pytest.raises(it.UnsupportedColumn, match="id"):
        it.column_type(it.NESTED_BASE, pa.int32())
    dup = pa.struct([("a", pa.int32()), ("a", pa.string())])
    with pytest.raises(it.UnsupportedColumn, match="two struct fields"):
        it.column_type(1, dup)


def test_schema_id_is_canonical() -> None:
    cols, _ = assign_columns(NESTED)
    schema, _, _ = it.iceberg_schema(cols, NESTED)
    sid = it.schema_id(schema)
    assert 0 <= sid < 2**31
    shuffled = json.loads(json.dumps(schema, sort_keys=True))
    assert it.schema_id(shuffled) == sid == it.schema_id({**schema, "schema-id": 99})
    renamed = [Column(c.id, "id2" if c.name == "id" else c.name, c.type, c.nullable) for c in cols]
    s2 = NESTED.set(0, NESTED.field(0).with_name("id2"))
    assert it.schema_id(it.iceberg_schema(renamed, s2)[0]) != sid


@pytest.fixture
def lh(tmp_path: Path) -> Iterator[lakehouse.Lakehouse]:
    yield from lakehouse_with_namespace(tmp_path)


def _ids(lh: lakehouse.Lakehouse) -> dict[str, int]:
    d = lh.describe_table("ns.t")
    schema, _, _ = it.iceberg_schema(d.columns, d.schema)
    parsed = Schema.model_validate({**schema, "schema-id": 0})
    return {name: fid for fid, name in parsed._lazy_id_to_name.items()}


def test_nested_ids_stable_across_schema_changes(lh: lakehouse.Lakehouse) -> None:
    with lh.begin() as t:
        t.create_table("ns.t", NESTED.remove(4).remove(3))
    before = _ids(lh)
    with lh.begin() as t:  # add a column in front, drop one, rename the struct
        t.alter_table("ns.t", rename_columns={"s": "s2"})
    with lh.begin() as t:
        cur = lh.describe_table("ns.t").schema
        t.alter_table(
            "ns.t",
            schema=pa.schema([pa.field("new", pa.struct([("q", pa.int8())])), *list(cur)]).remove(
                3
            ),
        )
    after = _ids(lh)
    d = lh.describe_table("ns.t")
    assert [c.name for c in d.columns] == ["new", "id", "s2"]
    for path, fid in before.items():
        if path.startswith("ll"):
            assert path not in after
            continue
        renamed = "s2" + path[1:] if path == "s" or path.startswith("s.") else path
        assert after[renamed] == fid, path
    new_id = d.column_ids()["new"]
    assert new_id == 4 and after["new.q"] == it.nested_id(4, 1)


# -- name mapping ---------------------------------------------------------------------------
def _file_names(files: list[DataFile]) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for f in files:
        for cid, name in f.columns:
            out.setdefault(cid, set()).add(name)
    return out


def _parquet_ids(path: Path, mapping: list[dict[str, Any]]) -> dict[str, int]:
    """The field id pyiceberg gives each column of a Parquet file through ``mapping``."""
    nm = parse_mapping_from_json(json.dumps(mapping))
    schema = pyarrow_to_schema(pq.read_schema(path), name_mapping=nm)
    return {name: fid for fid, name in schema._lazy_id_to_name.items()}


def test_name_mapping_renames_and_readded_names(lh: lakehouse.Lakehouse) -> None:
    schema = pa.schema(
        [("a", pa.int64()), ("b", pa.string()), ("s", pa.struct([("x", pa.list_(pa.int32()))]))]
    )
    with lh.begin() as t:
        t.create_table("ns.t", schema, FILES_ONLY)
    rows = {"a": [1], "b": ["x"], "s": [{"x": [1, 2]}]}
    with lh.begin() as t:
        t.append("ns.t", pa.table(rows, schema))
    with lh.begin() as t:  # 1 a -> a2, 2 b -> a: "a" names two ids, the current one wins
        t.alter_table("ns.t", rename_columns={"a": "a2", "b": "a"})
    with lh.begin() as t:
        t.append("ns.t", pa.table({"a2": [2], "a": ["y"]}))
    with lh.begin() as t:  # drop a2 (id 1); a new column "a2" gets id 4
        cur = lh.describe_table("ns.t").schema
        t.alter_table("ns.t", schema=cur.remove(0))
    with lh.begin() as t:
        cur = lh.describe_table("ns.t").schema
        t.alter_table("ns.t", schema=cur.append(pa.field("a2", pa.int32())))
    d = lh.describe_table("ns.t")
    assert d.column_ids() == {"a": 2, "s": 3, "a2": 4}
    files = lh.list_data_files("ns.t")
    assert len(files) == 2 and not any(f.is_inline for f in files)
    names = _file_names(files)
    assert names == {1: {"a", "a2"}, 2: {"b", "a"}, 3: {"s"}}
    mapping, lost = it.name_mapping(d.columns, d.schema, names)
    # "a": id 1 (first file) and id 2 (current): id 2's. "a2": id 1 (second file)
    # and id 4 (current): id 4's. So id 1 keeps no name: its files get field ids.
    assert lost == {1: {"a", "a2"}}
    by_id = {m["field-id"]: m for m in mapping}
    assert set(by_id) == {2, 3, 4}
    assert by_id[2]["names"] == ["a", "b"] and by_id[4]["names"] == ["a2"]
    assert by_id[3]["fields"] == [
        {
            "field-id": it.nested_id(3, 1),
            "names": ["x"],
            "fields": [{"field-id": it.nested_id(3, 2), "names": ["element", "item"]}],
        }
    ]
    parse_mapping_from_json(json.dumps(mapping))
    first, second = sorted(files, key=lambda f: dict(f.columns)[2] == "a")  # "b", then "a"
    nested = {"s": 3, "s.x": it.nested_id(3, 1), "s.x.element": it.nested_id(3, 2)}
    # by name alone, the second file's "a2" (id 1) would read as id 4: why files
    # using a lost name are rewritten with field ids
    assert _parquet_ids(data_file_path(lh, second), mapping) == {"a2": 4, "a": 2, **nested}
    # the first file's columns map as the mapping says, once "a" is id 1's again
    keep = [m for m in mapping if m["field-id"] != 2]
    keep += [{"field-id": 1, "names": ["a"]}, {"field-id": 2, "names": ["b"]}]
    assert _parquet_ids(data_file_path(lh, first), keep) == {"a": 1, "b": 2, **nested}
    # a dropped nested column is mapped through the type given for it
    with lh.begin() as t:
        t.alter_table("ns.t", schema=lh.describe_table("ns.t").schema.remove(1))
    d2 = lh.describe_table("ns.t")
    m2, _ = it.name_mapping(d2.columns, d2.schema, names, types={3: schema.field("s").type})
    assert {m["field-id"]: m for m in m2}[3] == by_id[3]
    m3, _ = it.name_mapping(d2.columns, d2.schema, names)
    assert "fields" not in {m["field-id"]: m for m in m3}[3]


def test_name_mapping_keeps_newest_id_for_a_dropped_name() -> None:
    cols = (Column(5, "x", "int64"), Column(2, "y", "string"))
    schema = pa.schema([("x", pa.int64()), ("y", pa.string())])
    mapping, lost = it.name_mapping(cols, schema, {1: {"x"}, 3: {"x", "z"}, 2: {"y"}})
    assert lost == {1: {"x"}, 3: {"x"}}
    assert [(m["field-id"], m["names"]) for m in mapping] == [(2, ["y"]), (3, ["z"]), (5, ["x"])]
    # two columns that swapped names: each current name stays with its column
    swapped = (Column(1, "b", "int64"), Column(2, "a", "int64"))
    ab = pa.schema([("b", pa.int64()), ("a", pa.int64())])
    mapping, lost = it.name_mapping(swapped, ab, {1: {"a"}, 2: {"b"}})
    assert lost == {1: {"a"}, 2: {"b"}}
    assert mapping == [{"field-id": 1, "names": ["b"]}, {"field-id": 2, "names": ["a"]}]
    # no current name: the newest id keeps it
    mapping, lost = it.name_mapping((), pa.schema([]), {1: {"x"}, 3: {"x"}})
    assert lost == {1: {"x"}} and mapping == [{"field-id": 3, "names": ["x"]}]


# -- Parquet field ids -----------------------------------------------------------------------
def test_field_ids_schema_through_parquet(tmp_path: Path) -> None:
    schema = NESTED.remove(3)
    cols, _ = assign_columns(schema)
    table = pa.table(
        {
            "id": [1, 2],
            "s": [{"a": 1, "l": [{"x": "p", "y": 1.5}], "m": [("k", [7])]}, None],
            "ll": [[dt.date(2024, 1, 1)], []],
            "fl": [[1, 2, 3], None],
        },
        schema,
    )
    ids = {c.name: c.id for c in cols}
    with_ids = it.field_ids_schema(table.schema, ids)
    pq.write_table(table.cast(with_ids), tmp_path / "f.parquet")
    back = pq.read_schema(tmp_path / "f.parquet")

    def fid(f: pa.Field) -> int:
        return int(f.metadata[b"PARQUET:field_id"])

    s = back.field("s").type
    assert fid(back.field("s")) == 2
    assert fid(s.field("l")) == it.nested_id(2, 2)
    assert fid(s.field("l").type.value_field) == it.nested_id(2, 3)
    assert fid(s.field("l").type.value_type.field("y")) == it.nested_id(2, 5)
    assert fid(s.field("m").type.key_field) == it.nested_id(2, 7)
    assert fid(s.field("m").type.item_field.type.value_field) == it.nested_id(2, 9)
    assert fid(back.field("fl").type.value_field) == it.nested_id(4, 1)
    # pyiceberg reads the ids of every field as the Iceberg schema has them
    supported = pa.schema([f for f in back if f.name != "fl"])
    from_file = pyarrow_to_schema(supported)
    mine, _, _ = it.iceberg_schema([c for c in cols if c.name != "fl"], schema)
    assert from_file == Schema.model_validate({**mine, "schema-id": 0})
    assert pq.read_table(tmp_path / "f.parquet").cast(schema).equals(table)
    with pytest.raises(ValueError, match="'nope'"):
        it.field_ids_schema(pa.schema([("nope", pa.int8())]), ids)


# -- files every reader reads ------------------------------------------------------------------
READABLE: list[tuple[pa.DataType, pa.DataType | None]] = [
    (pa.int64(), pa.int64()),
    (pa.uint32(), pa.int64()),
    (pa.uint16(), pa.uint16()),
    (pa.int8(), pa.int8()),
    (pa.date64(), pa.date32()),
    (pa.date32(), pa.date32()),
    (pa.string_view(), pa.large_string()),
    (pa.binary_view(), pa.large_binary()),
    (pa.list_(pa.string_view()), pa.list_(pa.large_string())),
    (pa.time32("ms"), pa.time64("us")),
    (pa.time32("s"), pa.time64("us")),
    (pa.timestamp("ms", "Europe/Amsterdam"), pa.timestamp("ms", "UTC")),
    (pa.timestamp("us", "+00:00"), pa.timestamp("us", "+00:00")),
    (pa.time64("ns"), None),
    (pa.timestamp("ns"), None),
    (pa.duration("s"), None),
    (pa.decimal256(20, 2), None),
    (pa.uint64(), None),
    (pa.dictionary(pa.int8(), pa.string()), None),
    (pa.struct([("t", pa.time32("s"))]), pa.struct([("t", pa.time64("us"))])),
    (pa.struct([("t", pa.time64("ns"))]), None),
    (pa.map_(pa.string(), pa.time32("ms")), pa.map_(pa.string(), pa.time64("us"))),
    (pa.large_list(pa.time32("ms")), pa.large_list(pa.time64("us"))),
]


@pytest.mark.parametrize(("arrow", "readable"), READABLE, ids=[str(t) for t, _ in READABLE])
def test_readable_type(arrow: pa.DataType, readable: pa.DataType | None) -> None:
    assert it.readable_type(arrow) == readable


def test_readable_rows_are_read_by_pyiceberg(tmp_path: Path) -> None:
    """A file of every kind of column: pyiceberg refuses it as written, reads the
    readable rows (field ids from field_ids_schema) as the Iceberg schema says,
    and the values are the same."""
    when = dt.datetime(2024, 3, 31, 1, 30, tzinfo=UTC)
    cols = {
        "k": pa.array([1, None], pa.int64()),
        "t32": pa.array([dt.time(1, 2, 3, 4000), None], pa.time32("ms")),
        "ams": pa.array([when, None], pa.timestamp("ms", "Europe/Amsterdam")),
        "tns": pa.array([dt.time(1), None], pa.time64("ns")),
        "dur": pa.array([5, None], pa.duration("s")),
        "st": pa.array([{"t": dt.time(4)}, None], pa.struct([("t", pa.time32("s"))])),
        "u64": pa.array([2**64 - 1, 0], pa.uint64()),
    }
    rows = pa.table(cols)
    schema = rows.schema
    columns, _ = assign_columns(schema)
    ids = {c.name: c.id for c in columns}
    pq.write_table(rows.cast(it.field_ids_schema(schema, ids)), tmp_path / "raw.parquet")
    with pytest.raises(UnsupportedPyArrowTypeException, match="t32"):
        pyarrow_to_schema(pq.read_schema(tmp_path / "raw.parquet"))
    out = it.readable_rows(rows)
    assert out.column_names == ["k", "t32", "ams", "st"]
    pq.write_table(out.cast(it.field_ids_schema(out.schema, ids)), tmp_path / "ok.parquet")
    from_file = pyarrow_to_schema(pq.read_schema(tmp_path / "ok.parquet"))
    mine, omitted, _ = it.iceberg_schema(columns, schema)
    assert omitted == ["tns", "dur", "u64"]
    assert from_file == Schema.model_validate({**mine, "schema-id": 0})
    back = pq.read_table(tmp_path / "ok.parquet")
    assert back.to_pylist() == rows.select(out.column_names).to_pylist()
    assert it.readable_rows(out) is out  # nothing to change: the same table


def test_files_with_types_clients_misread_are_materialised(lh: lakehouse.Lakehouse) -> None:
    """View types with positional deletes (pyiceberg), uint32 filters above 2**31 - 1
    (pyiceberg) and date64 (polars) read right once their files are materialised."""
    import polars as pl
    from pyiceberg.table import StaticTable

    from lakehouse.iceberg import write_metadata

    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("sv", pa.string_view()),
            ("bv", pa.binary_view()),
            ("u32", pa.uint32()),
            ("d64", pa.date64()),
            ("u8", pa.uint8()),
        ]
    )
    big = 4_092_722_238
    rows: dict[str, list[Any]] = {
        "id": [0, 1, 2, 3],
        "sv": ["a", "b", None, "d" * 40],
        "bv": [b"\x00", None, b"c", b"d" * 40],
        "u32": [big, 1, 2**31, None],
        "d64": [dt.date(2020, 1, 1), dt.date(1969, 12, 31), None, dt.date(2000, 2, 29)],
        "u8": [255, 0, None, 7],
    }
    with lh.begin() as t:
        t.create_table("ns.t", schema, FILES_ONLY)
    with lh.begin() as t:
        t.append("ns.t", pa.table(rows, schema))
    with lh.begin() as t:
        t.delete("ns.t", "id = 1")
    tbl = StaticTable.from_metadata(write_metadata(lh, "ns.t"))
    want = [{k: rows[k][i] for k in rows} for i in (0, 2, 3)]
    assert sorted(tbl.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == want

    def ids(expr: str) -> list[int]:
        return sorted(
            tbl.scan(row_filter=expr, selected_fields=("id",)).to_arrow()["id"].to_pylist()
        )

    assert ids(f"u32 = {big}") == [0]
    assert ids(f"u32 < {big}") == [2]
    assert ids(f"u32 >= {2**31}") == [0, 2]
    assert ids("u8 = 255") == [0]
    assert ids("u8 < 255") == [3]
    got = pl.scan_iceberg(tbl).select("id", "d64").collect().sort("id").to_dicts()
    assert got == [{"id": r["id"], "d64": r["d64"]} for r in want]


def test_dropped_nested_column_is_mapped_from_an_older_schema(lh: lakehouse.Lakehouse) -> None:
    """A struct column dropped while a file still holds it: its nested fields are
    mapped from the schema of a snapshot that had it, so pyiceberg (which maps every
    field of a file) reads the file."""
    from pyiceberg.table import StaticTable

    from lakehouse.iceberg import write_metadata

    st = pa.struct(
        [("x", pa.int32()), ("l", pa.list_(pa.string())), ("m", pa.map_(pa.string(), pa.int8()))]
    )
    with lh.begin() as t:
        t.create_table("ns.t", pa.schema([("a", pa.int64()), ("s", st)]), FILES_ONLY)
    with lh.begin() as t:
        s = pa.array([{"x": 1, "l": ["p"], "m": [("k", 1)]}, None], st)
        t.append("ns.t", pa.table({"a": [1, 2], "s": s}))
    old = lh.describe_table("ns.t")
    with lh.begin() as t:
        t.alter_table("ns.t", schema=pa.schema([("a", pa.int64())]))
    with lh.begin() as t:
        t.append("ns.t", pa.table({"a": [3]}))
    loc = write_metadata(lh, "ns.t")
    meta = json.loads(Path(loc).read_text())
    got = parse_mapping_from_json(meta["properties"][it.NAME_MAPPING_PROPERTY])
    want, _ = it.name_mapping(old.columns, old.schema, {})
    assert (
        json.loads(got.model_dump_json())[1]
        == json.loads(parse_mapping_from_json(json.dumps(want)).model_dump_json())[1]
    )
    assert sorted(StaticTable.from_metadata(loc).scan().to_arrow()["a"].to_pylist()) == [1, 2, 3]
    # without an older schema the dropped column is mapped by name only
    d = lh.describe_table("ns.t")
    bare, _ = it.name_mapping(d.columns, d.schema, {2: {"s"}})
    assert bare[1] == {"field-id": 2, "names": ["s"]}
    sch, _, _ = it.iceberg_schema(old.columns, old.schema)
    mapped, _ = it.name_mapping(d.columns, d.schema, {2: {"s"}}, schemas=[sch])
    assert mapped == want
