"""Arrow ``PARQUET:field_id`` metadata never reaches a table's schema or data files.

A schema taken from an Iceberg table or file (pyiceberg's ``as_arrow()``,
``pq.read_schema``) carries *that* table's field ids. Iceberg readers prefer a
file's field ids over the name mapping ``write_metadata`` gives them, so ids
written into our data files in another order return columns swapped or null.
Each test gives the lakehouse ids in the reverse order of the column ids it
assigns, then checks the table's schema, every data file's footer and what
pyiceberg reads through ``write_metadata``. Other field metadata stays.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from iceberg_fixtures import FILES_ONLY, NO_AUTO
from pyiceberg.table import StaticTable

import lakehouse
from lakehouse.iceberg import write_metadata
from lakehouse.model import FIELD_ID_KEY, without_field_ids


def _meta(field_id: int, **other: str) -> dict[bytes, bytes]:
    return {
        FIELD_ID_KEY: str(field_id).encode(),
        **{k.encode(): v.encode() for k, v in other.items()},
    }


#: ids of another table: ``a`` is its 3rd field, ``b`` its 2nd, ``s`` its 1st (and
#: inside ``s``, ``y`` comes before ``x``)
FOREIGN = pa.schema(
    [
        pa.field("a", pa.int64(), metadata=_meta(3, doc="the a")),
        pa.field("b", pa.int64(), metadata=_meta(2)),
        pa.field(
            "s",
            pa.struct(
                [
                    pa.field("x", pa.int32(), metadata=_meta(12, doc="the x")),
                    pa.field("y", pa.int32(), metadata=_meta(11)),
                    pa.field("l", pa.list_(pa.field("element", pa.string(), metadata=_meta(14)))),
                ]
            ),
            metadata=_meta(1),
        ),
    ]
)
PLAIN = without_field_ids(FOREIGN)


def _ids(schema: pa.Schema) -> list[str]:
    """Every field path of ``schema`` with a field id (empty: none)."""
    out: list[str] = []

    def walk(f: pa.Field, path: str) -> None:
        if f.metadata and FIELD_ID_KEY in f.metadata:
            out.append(path)
        t = f.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(t.field(i), f"{path}.{t.field(i).name}")
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            walk(t.value_field, f"{path}[]")
        elif pa.types.is_map(t):
            walk(t.key_field, f"{path}.key")
            walk(t.item_field, f"{path}.value")

    for f in schema:
        walk(f, f.name)
    return out


def _rows(n: int, start: int = 0, schema: pa.Schema = PLAIN) -> pa.Table:
    ids = range(start, start + n)
    return pa.table(
        {
            "a": [i for i in ids],
            "b": [1000 + i for i in ids],
            "s": [{"x": i, "y": -i, "l": [f"v{i}"]} for i in ids],
        },
        schema=schema,
    )


def _data_files(path: Path) -> list[Path]:
    files = sorted((path / "data").rglob("*.parquet"))
    assert files, "the table has no Parquet data files"
    return files


def _check_files(path: Path) -> None:
    for f in _data_files(path):
        assert _ids(pq.read_schema(f)) == [], f"{f} carries field ids"


def _iceberg(lh: Any, table: str) -> dict[str, list[Any]]:
    rows = StaticTable.from_metadata(write_metadata(lh, table)).scan().to_arrow()
    out: dict[str, list[Any]] = rows.sort_by("a").to_pydict()
    return out


def _expected(lh: Any, table: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = lh.read(table).sort_by("a").to_pydict()
    return out


def test_without_field_ids_keeps_other_metadata() -> None:
    assert _ids(FOREIGN) == ["a", "b", "s", "s.x", "s.y", "s.l[]"]
    clean = without_field_ids(FOREIGN)
    assert _ids(clean) == []
    assert clean.field("a").metadata == {b"doc": b"the a"}
    assert clean.field("s").type.field("x").metadata == {b"doc": b"the x"}
    assert [f.type for f in clean] == [f.type for f in FOREIGN]
    assert without_field_ids(clean) is clean
    m = pa.schema(
        [
            pa.field(
                "m",
                pa.map_(
                    pa.field("k", pa.string(), False, _meta(5)),
                    pa.field("v", pa.int8(), metadata=_meta(6)),
                ),
            )
        ],
        metadata={b"top": b"kept"},
    )
    assert _ids(m) == ["m.key", "m.value"]
    assert _ids(without_field_ids(m)) == [] and without_field_ids(m).metadata == {b"top": b"kept"}


@pytest.mark.parametrize("props", [FILES_ONLY, NO_AUTO], ids=["parquet", "inline"])
def test_create_table_drops_field_ids(tmp_path: Path, props: dict[str, str]) -> None:
    lh = lakehouse.open(str(tmp_path))
    with lh.begin() as t:
        t.create_namespace("n")
        t.create_table("n.t", FOREIGN, props)
    schema = lh.describe_table("n.t").schema
    assert _ids(schema) == []
    assert schema.field("a").metadata == {b"doc": b"the a"}
    assert [c.name for c in lh.describe_table("n.t").columns] == ["a", "b", "s"]
    lh.append("n.t", _rows(3))
    lh.append("n.t", _rows(2, start=10, schema=FOREIGN))
    assert _iceberg(lh, "n.t") == _expected(lh, "n.t")
    assert _iceberg(lh, "n.t")["b"] == [1000, 1001, 1002, 1010, 1011]
    if props is FILES_ONLY:
        _check_files(tmp_path)


def test_alter_table_drops_field_ids(tmp_path: Path) -> None:
    lh = lakehouse.open(str(tmp_path))
    with lh.begin() as t:
        t.create_namespace("n")
        t.create_table("n.t", pa.schema([("a", pa.int64())]), FILES_ONLY)
    lh.append("n.t", pa.table({"a": [5, 6]}))
    with lh.begin() as t:
        t.alter_table("n.t", schema=FOREIGN)
    assert _ids(lh.describe_table("n.t").schema) == []
    lh.append("n.t", _rows(2, start=20, schema=FOREIGN))
    _check_files(tmp_path)
    got = _iceberg(lh, "n.t")
    assert got == _expected(lh, "n.t")
    assert got["b"] == [None, None, 1020, 1021]
    assert got["s"][2:] == [{"x": 20, "y": -20, "l": ["v20"]}, {"x": 21, "y": -21, "l": ["v21"]}]


def test_append_drops_field_ids(tmp_path: Path) -> None:
    lh = lakehouse.open(str(tmp_path))
    with lh.begin() as t:
        t.create_namespace("n")
        t.create_table("n.t", PLAIN, FILES_ONLY)
    lh.append("n.t", _rows(4, schema=FOREIGN))
    lh.append("n.t", _rows(1, start=4, schema=FOREIGN))
    _check_files(tmp_path)
    got = _iceberg(lh, "n.t")
    assert got == _expected(lh, "n.t")
    assert got["a"] == [0, 1, 2, 3, 4] and got["b"] == [1000, 1001, 1002, 1003, 1004]
    with lh.begin() as t:
        assert t.compact("n.t", min_files=2).files_added == 1
    _check_files(tmp_path)
    assert _iceberg(lh, "n.t") == got
