"""Arrow types as Iceberg (format v2) types: field ids, schemas and schema ids.

**Field ids.** A top-level field's id is the column id (stable, never reused).
A nested field (struct child, list element, map key and value) of column ``c``
gets ``nested_id(c, k) = NESTED_BASE + c * NESTED_SPAN + k``, ``k = 1, 2, ...``
counted in pre-order over the column's Arrow type (a field is numbered before
the fields inside it; a map's key subtree before its value)::

    c = 3: struct<a: int64, b: list<element: struct<x: string>>, m: map<string, int32>>
           a -> k=1   b -> k=2   element -> k=3   x -> k=4   m -> k=5   key -> 6   value -> 7
    id(b.element.x) = 2**24 + 3 * 2**12 + 4 = 16789508

Since a column keeps its type for its whole life (a type change is a new
column), these ids never change when columns are added, renamed or dropped.
A column with more than ``NESTED_SPAN - 1`` nested fields, or an id so large
that its nested ids would reach Iceberg's reserved ids, is an
:class:`UnsupportedColumn`, like a type Iceberg v2 cannot hold (uint64,
float16, timestamp[ns], time64[ns], duration, interval, dictionary, null,
decimal256, extension types, ...). Those columns are left out of the Iceberg
schema and listed in the table property :data:`OMITTED_PROPERTY`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeAlias

import pyarrow as pa
from crc32c import crc32c

from lakehouse.model import Column

NESTED_BASE = 1 << 24
#: nested field ids per column (k = 1 .. NESTED_SPAN - 1)
NESTED_SPAN = 1 << 12
#: Iceberg reserves the ids from here up (metadata columns: _file, _pos, ...)
RESERVED_IDS = 2**31 - 1 - 200
#: the largest column id whose nested fields get ids
MAX_NESTED_COLUMN_ID = (RESERVED_IDS - NESTED_BASE) // NESTED_SPAN - 1
#: table property listing the columns left out of the Iceberg schema
OMITTED_PROPERTY = "lakehouse.iceberg.omitted-columns"
#: table property holding the name mapping (JSON)
NAME_MAPPING_PROPERTY = "schema.name-mapping.default"

IcebergType: TypeAlias = "str | dict[str, Any]"


class UnsupportedColumn(ValueError):
    """A column Iceberg v2 cannot describe (its type, or too many nested fields)."""


def nested_id(column_id: int, k: int) -> int:
    """The field id of the ``k``-th nested field (pre-order, from 1) of column ``column_id``."""
    return NESTED_BASE + column_id * NESTED_SPAN + k


# -- the nested fields of a column ----------------------------------------------------------
@dataclass(frozen=True)
class Node:
    """One nested field: its ``k``, its names (the Parquet name, then Arrow's when it
    differs), its Arrow field and the fields inside it."""

    k: int
    names: tuple[str, ...]
    field: pa.Field
    children: tuple[Node, ...]


def _child_fields(t: pa.DataType) -> list[tuple[tuple[str, ...], pa.Field]]:
    if pa.types.is_struct(t):
        return [((t.field(i).name,), t.field(i)) for i in range(t.num_fields)]
    if pa.types.is_map(t):
        kf, vf = t.key_field, t.item_field
        return [(_names(kf.name, "key"), kf), (_names(vf.name, "value"), vf)]
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        return [(_names(t.value_field.name, "element"), t.value_field)]
    return []


def _names(arrow_name: str, parquet_name: str) -> tuple[str, ...]:
    return (arrow_name,) if arrow_name == parquet_name else (parquet_name, arrow_name)


def tree(t: pa.DataType) -> tuple[Node, ...]:
    """The nested fields of a column of type ``t``, numbered in pre-order."""
    counter = [0]

    def walk(t: pa.DataType) -> tuple[Node, ...]:
        out = []
        for names, f in _child_fields(t):
            counter[0] += 1
            k = counter[0]
            out.append(Node(k, names, f, walk(f.type)))
        return tuple(out)

    return walk(t)


def _count(nodes: Sequence[Node]) -> int:
    return sum(1 + _count(n.children) for n in nodes)


def nodes_for(column_id: int, t: pa.DataType, what: str) -> tuple[Node, ...]:
    """``tree(t)`` after checking its ids fit (UnsupportedColumn if not)."""
    nodes = tree(t)
    if nodes:
        if _count(nodes) >= NESTED_SPAN:
            raise UnsupportedColumn(
                f"column {what} has {_count(nodes)} nested fields; Iceberg ids allow "
                f"{NESTED_SPAN - 1} per column"
            )
        if not 0 <= column_id <= MAX_NESTED_COLUMN_ID:
            raise UnsupportedColumn(
                f"column {what} has id {column_id}; nested columns need an id <= "
                f"{MAX_NESTED_COLUMN_ID}"
            )
    elif not 0 <= column_id < NESTED_BASE:
        raise UnsupportedColumn(f"column {what} has id {column_id}; the limit is {NESTED_BASE - 1}")
    return nodes


# -- Arrow type -> Iceberg type ---------------------------------------------------------------
@lru_cache(maxsize=1024)
def primitive_type(t: pa.DataType) -> str | None:
    """The Iceberg primitive type of Arrow type ``t`` (None: nested or not representable)."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        if t in (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16()):
            return "int"
        return "long" if t in (pa.int64(), pa.uint32()) else None
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_decimal128(t):
        return f"decimal({t.precision}, {t.scale})" if t.precision <= 38 else None
    if pa.types.is_date32(t) or pa.types.is_date64(t):
        return "date"
    if pa.types.is_time32(t) or (pa.types.is_time64(t) and t.unit == "us"):
        return "time"
    if pa.types.is_timestamp(t) and t.unit != "ns":
        return "timestamp" if t.tz is None else "timestamptz"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_fixed_size_binary(t):
        return f"fixed[{t.byte_width}]"
    return None


def _iceberg_type(t: pa.DataType, nodes: Sequence[Node], cid: int, what: str) -> IcebergType:
    prim = primitive_type(t)
    if prim is not None:
        return prim
    if pa.types.is_struct(t):
        fields = []
        seen: set[str] = set()
        for n in nodes:
            if n.field.name in seen:
                raise UnsupportedColumn(f"column {what} has two struct fields {n.field.name!r}")
            seen.add(n.field.name)
            fields.append(
                {
                    "id": nested_id(cid, n.k),
                    "name": n.field.name,
                    "required": not n.field.nullable,
                    "type": _iceberg_type(n.field.type, n.children, cid, what),
                }
            )
        return {"type": "struct", "fields": fields}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        (e,) = nodes
        return {
            "type": "list",
            "element-id": nested_id(cid, e.k),
            "element": _iceberg_type(e.field.type, e.children, cid, what),
            "element-required": not e.field.nullable,
        }
    if pa.types.is_map(t):
        key, value = nodes
        return {
            "type": "map",
            "key-id": nested_id(cid, key.k),
            "key": _iceberg_type(key.field.type, key.children, cid, what),
            "value-id": nested_id(cid, value.k),
            "value": _iceberg_type(value.field.type, value.children, cid, what),
            "value-required": not value.field.nullable,
        }
    raise UnsupportedColumn(f"column {what} has type {t}, which Iceberg v2 cannot hold")


def column_type(column_id: int, t: pa.DataType, name: str = "") -> IcebergType:
    """The Iceberg type (JSON) of column ``column_id`` of Arrow type ``t``, nested ids
    included (UnsupportedColumn if Iceberg v2 cannot hold it)."""
    what = repr(name) if name else f"#{column_id}"
    return _iceberg_type(t, nodes_for(column_id, t, what), column_id, what)


def _max_id(typ: IcebergType) -> int:
    if isinstance(typ, str):
        return 0
    kind = typ["type"]
    if kind == "struct":
        return max([0, *(max(int(f["id"]), _max_id(f["type"])) for f in typ["fields"])])
    if kind == "list":
        return max(int(typ["element-id"]), _max_id(typ["element"]))
    ids = (int(typ["key-id"]), int(typ["value-id"]))
    return max(*ids, _max_id(typ["key"]), _max_id(typ["value"]))


def iceberg_schema(
    columns: Sequence[Column], schema: pa.Schema
) -> tuple[dict[str, Any], list[str], int]:
    """The Iceberg schema JSON (without ``schema-id``) of a table's columns, the names
    of the columns left out (types Iceberg v2 cannot hold), and the largest field id."""
    fields: list[dict[str, Any]] = []
    omitted: list[str] = []
    last = 0
    for c in columns:
        try:
            typ = column_type(c.id, schema.field(c.name).type, c.name)
        except UnsupportedColumn:
            omitted.append(c.name)
            continue
        fields.append({"id": c.id, "name": c.name, "required": not c.nullable, "type": typ})
        last = max(last, c.id, _max_id(typ))
    return {"type": "struct", "fields": fields}, omitted, last


def schema_id(schema_json: Mapping[str, Any]) -> int:
    """A schema's id: CRC-32C of its canonical JSON (sorted keys, no spaces), 31 bits."""
    body = {k: v for k, v in schema_json.items() if k != "schema-id"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return int(crc32c(text.encode("utf-8"))) & 0x7FFFFFFF


def supported(columns: Sequence[Column], schema: pa.Schema) -> dict[int, pa.DataType]:
    """Arrow type by id of the columns the Iceberg schema holds."""
    out = {}
    for c in columns:
        t = schema.field(c.name).type
        try:
            column_type(c.id, t, c.name)
        except UnsupportedColumn:
            continue
        out[c.id] = t
    return out
