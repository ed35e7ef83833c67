"""The lakehouse's table model as Iceberg (format v2) sees it: schemas, field ids,
name mappings, column metrics, partition specs and sort orders.

Pure functions from :class:`~lakehouse.model.TableDef` parts and
:class:`~lakehouse.model.DataFile` records to the JSON and Avro values of
Iceberg metadata (spec: https://iceberg.apache.org/spec/); no I/O, no pyiceberg.

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

**Name mapping.** Data files carry no Parquet field ids, so readers find a
file's columns by name (``schema.name-mapping.default``): every id lists every
name a live file uses for it and its current name; nested fields list the
Arrow child names (a list's element also as ``element``, a map's key and value
as ``key``/``value``, the Parquet names). A name two ids claim (a column
dropped and another added under its name, or two columns that swapped names)
stays with the column whose current name it is, else with the newest id;
files that use it for the other id are rewritten with field ids.

**Bounds.** Iceberg's single-value serialization (spec Appendix D) of the
file record's bounds (:mod:`lakehouse.data.stats`), decoded with the column's
type: timestamps and times in microseconds, dates in days (a lower bound
rounded down, an upper bound up), decimals as the unscaled two's-complement
big-endian integer in the fewest bytes. A bound is left out whenever it might
be wrong for some reader: a string bound holding a character above U+D7FF
(Java readers compare UTF-16 units, which order U+E000..U+FFFF above
supplementary characters, unlike UTF-8 and code points), a float bound that
is not exactly a float32, a value outside the Iceberg type's range.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeAlias
from uuid import UUID

import pyarrow as pa
from crc32c import crc32c

from lakehouse import partition_encoding as pe
from lakehouse.data.stats import stat_scalar
from lakehouse.model import Column, DataFile, TableDef

if TYPE_CHECKING:
    from lakehouse.partition import PartitionField, PartitionSpec

#: nested field ids start above every column id
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

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_NS_PER_US = 1000
_NS_PER_DAY = 86_400 * 10**9
_US_PER_DAY = 86_400 * 10**6
_US_PER = {"s": 10**6, "ms": 10**3, "us": 1}
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_TZ = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DAY = _EPOCH.date().toordinal()


class UnsupportedColumn(ValueError):
    """A column Iceberg v2 cannot describe (its type, or too many nested fields)."""


def nested_id(column_id: int, k: int) -> int:
    """The field id of the ``k``-th nested field (pre-order, from 1) of column ``column_id``."""
    return NESTED_BASE + column_id * NESTED_SPAN + k


# -- the nested fields of a column ----------------------------------------------------------
@dataclass(frozen=True)
class _Node:
    """One nested field: its ``k``, its names (the Parquet name, then Arrow's when it
    differs), its Arrow field and the fields inside it."""

    k: int
    names: tuple[str, ...]
    field: pa.Field
    children: tuple[_Node, ...]


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


def _tree(t: pa.DataType) -> tuple[_Node, ...]:
    """The nested fields of a column of type ``t``, numbered in pre-order."""
    counter = [0]

    def walk(t: pa.DataType) -> tuple[_Node, ...]:
        out = []
        for names, f in _child_fields(t):
            counter[0] += 1
            k = counter[0]
            out.append(_Node(k, names, f, walk(f.type)))
        return tuple(out)

    return walk(t)


def _count(nodes: Sequence[_Node]) -> int:
    return sum(1 + _count(n.children) for n in nodes)


def _nodes_for(column_id: int, t: pa.DataType, what: str) -> tuple[_Node, ...]:
    """``_tree(t)`` after checking its ids fit (UnsupportedColumn if not)."""
    nodes = _tree(t)
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


def _iceberg_type(t: pa.DataType, nodes: Sequence[_Node], cid: int, what: str) -> IcebergType:
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
    return _iceberg_type(t, _nodes_for(column_id, t, what), column_id, what)


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


def _supported(columns: Sequence[Column], schema: pa.Schema) -> dict[int, pa.DataType]:
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


# -- name mapping and Parquet field ids -----------------------------------------------------
def _mapped(cid: int, nodes: Sequence[_Node]) -> list[dict[str, Any]]:
    return [
        {"field-id": nested_id(cid, n.k), "names": list(n.names)}
        | ({"fields": _mapped(cid, n.children)} if n.children else {})
        for n in nodes
    ]


def _mapped_json(typ: IcebergType) -> list[dict[str, Any]]:
    """The name mapping of the nested fields of Iceberg type ``typ`` (JSON): the
    names :func:`_mapped` gives them (a list element also as Arrow's ``item``)."""
    if isinstance(typ, str):
        return []
    kind = typ["type"]
    if kind == "struct":
        kids = [(f["id"], [f["name"]], f["type"]) for f in typ["fields"]]
    elif kind == "list":
        kids = [(typ["element-id"], ["element", "item"], typ["element"])]
    else:
        kids = [(typ["key-id"], ["key"], typ["key"]), (typ["value-id"], ["value"], typ["value"])]
    out = []
    for fid, names, sub in kids:
        entry: dict[str, Any] = {"field-id": int(fid), "names": names}
        children = _mapped_json(sub)
        if children:
            entry["fields"] = children
        out.append(entry)
    return out


def name_mapping(
    columns: Sequence[Column],
    schema: pa.Schema,
    file_names: Mapping[int, set[str]],
    *,
    types: Mapping[int, pa.DataType] | None = None,
    schemas: Sequence[Mapping[str, Any]] = (),
) -> tuple[list[dict[str, Any]], dict[int, set[str]]]:
    """Iceberg's name mapping (JSON list) for a table whose live files name column
    ids as ``file_names`` says, and the names some ids lost to others (``{id:
    names}``: files using those names for those ids must get field ids).

    Every column id gets every name its files use and its current name, omitted
    columns too (a reader maps every column of a file). A name claimed by two ids
    stays with the column whose current name it is, else with the newest (largest)
    id. Nested fields are mapped from the Arrow type: the column's current one, or
    for an id no longer in ``columns`` (a dropped column) ``types[id]``, else its
    type in the newest of the Iceberg schemas ``schemas`` (oldest first) that holds
    it; without either its nested fields are not mapped (and readers that map
    every field of a file, as pyiceberg does, cannot read files holding it).
    """
    current = {c.id: c.name for c in columns}
    arrow = {c.id: schema.field(c.name).type for c in columns}
    for cid, t in (types or {}).items():
        arrow.setdefault(cid, t)
    older: dict[int, Any] = {}
    for sj in schemas:
        for fj in sj.get("fields", ()):
            if not isinstance(fj.get("type"), str):
                older[int(fj["id"])] = fj["type"]
    names: dict[int, set[str]] = {cid: set(ns) for cid, ns in file_names.items()}
    for cid, name in current.items():
        names.setdefault(cid, set()).add(name)
    claims: dict[str, list[int]] = {}
    for cid, ns in names.items():
        for n in ns:
            claims.setdefault(n, []).append(cid)
    by_current = {name: cid for cid, name in current.items()}
    lost: dict[int, set[str]] = {}
    for n, ids in claims.items():
        if len(ids) < 2:
            continue
        winner = by_current.get(n, max(ids))
        for cid in ids:
            if cid != winner:
                names[cid].discard(n)
                lost.setdefault(cid, set()).add(n)
    out: list[dict[str, Any]] = []
    for cid in sorted(names):
        if not names[cid]:
            continue
        entry: dict[str, Any] = {"field-id": cid, "names": sorted(names[cid])}
        t = arrow.get(cid)
        if t is not None:
            try:
                nodes = _nodes_for(cid, t, f"#{cid}")
            except UnsupportedColumn:
                nodes = ()
            if nodes:
                entry["fields"] = _mapped(cid, nodes)
        elif cid in older:
            entry["fields"] = _mapped_json(older[cid])
        out.append(entry)
    return out, lost


_FIELD_ID = b"PARQUET:field_id"


def _with_id(f: pa.Field, fid: int, typ: pa.DataType | None = None) -> pa.Field:
    meta = dict(f.metadata or {})
    meta[_FIELD_ID] = str(fid).encode()
    return pa.field(f.name, f.type if typ is None else typ, f.nullable, meta)


def _typed_ids(t: pa.DataType, cid: int, nodes: Sequence[_Node]) -> pa.DataType:
    if not nodes:
        return t

    def child(n: _Node) -> pa.Field:
        return _with_id(n.field, nested_id(cid, n.k), _typed_ids(n.field.type, cid, n.children))

    if pa.types.is_struct(t):
        return pa.struct([child(n) for n in nodes])
    if pa.types.is_map(t):
        key, value = nodes
        return pa.map_(child(key), child(value), keys_sorted=t.keys_sorted)
    (e,) = nodes
    if pa.types.is_large_list(t):
        return pa.large_list(child(e))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(child(e), t.list_size)
    if pa.types.is_list(t):
        return pa.list_(child(e))
    raise UnsupportedColumn(f"no Parquet field ids for the nested type {t}")


def field_ids_schema(arrow_schema_of_file: pa.Schema, ids_by_name: Mapping[str, int]) -> pa.Schema:
    """``arrow_schema_of_file`` with ``PARQUET:field_id`` on every field: top-level
    fields by ``ids_by_name`` (their names in the file), nested ones by
    :func:`nested_id`. ValueError for a field ``ids_by_name`` does not name."""
    out = []
    for f in arrow_schema_of_file:
        if f.name not in ids_by_name:
            raise ValueError(f"column {f.name!r} of the file has no field id")
        cid = ids_by_name[f.name]
        try:
            nodes = _tree(f.type)
            typ = _typed_ids(f.type, cid, nodes)
        except UnsupportedColumn:
            typ = f.type
        out.append(_with_id(f, cid, typ))
    return pa.schema(out, arrow_schema_of_file.metadata)


# -- files every reader reads -----------------------------------------------------------------
_UTC_NAMES = ("UTC", "+00:00", "Etc/UTC", "Z")
_READABLE = {
    pa.uint32(): pa.int64(),
    pa.date64(): pa.date32(),
    pa.string_view(): pa.large_string(),
    pa.binary_view(): pa.large_binary(),
}


def readable_type(t: pa.DataType) -> pa.DataType | None:
    """The Arrow type a column of type ``t`` gets in a Parquet file written for
    Iceberg readers (a materialised file): ``t`` itself, or a type holding the same
    values that every reader reads, or None for a column the Iceberg schema leaves
    out (dropped from the file). pyiceberg refuses ``time32`` and time zones other
    than UTC in a file (``time64[us]``, the same instants in UTC), takes a
    ``uint32`` column for an Iceberg int and so misjudges literals above 2**31 - 1
    (``int64``), cannot apply positional deletes to view types (``large_string``,
    ``large_binary``); polars refuses ``date64`` for a date (``date32``)."""
    prim = primitive_type(t)
    if prim is not None:
        if pa.types.is_time32(t):
            return pa.time64("us")
        if pa.types.is_timestamp(t) and t.tz is not None and t.tz not in _UTC_NAMES:
            return pa.timestamp(t.unit, "UTC")
        return _READABLE.get(t, t)
    try:
        column_type(0, t)
    except UnsupportedColumn:
        return None

    def field(f: pa.Field) -> pa.Field:
        sub = readable_type(f.type)
        assert sub is not None  # column_type accepted every nested type
        return f.with_type(sub)

    if pa.types.is_struct(t):
        return pa.struct([field(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(field(t.key_field), field(t.item_field), t.keys_sorted)
    if pa.types.is_large_list(t):
        return pa.large_list(field(t.value_field))
    return pa.list_(field(t.value_field))


def readable_rows(rows: pa.Table) -> pa.Table:
    """``rows`` with every column in its :func:`readable_type` (columns the Iceberg
    schema leaves out dropped): the same rows in the same order."""
    keep, fields = [], []
    for f in rows.schema:
        t = readable_type(f.type)
        if t is not None:
            keep.append(f.name)
            fields.append(f.with_type(t))
    target = pa.schema(fields, rows.schema.metadata)
    if rows.schema.equals(target):
        return rows
    out = rows.select(keep)
    # unsafe: a date64 not at midnight becomes its day; no other cast here loses anything
    return out if out.schema.equals(target) else out.cast(target, safe=False)


# -- single-value serialization -------------------------------------------------------------
def _unscaled(v: int | Decimal, scale: int) -> int | None:
    """The unscaled integer of ``v`` at ``scale`` (None: not exact at that scale)."""
    try:
        return pe.unscaled(v, scale)
    except ValueError:
        return None


def bound_bytes(iceberg_type: IcebergType, value: Any) -> bytes | None:
    """Iceberg's binary single-value serialization of ``value`` (spec Appendix D),
    or None when ``value`` is not a value of ``iceberg_type``.

    Values: bool, int, float, Decimal, str, bytes, UUID as Python has them; a date
    as ``datetime.date`` or days, a time as ``datetime.time`` or microseconds, a
    timestamp as ``datetime`` (naive: UTC) or microseconds since the epoch.
    """
    if value is None or not isinstance(iceberg_type, str):
        return None
    t = iceberg_type
    try:
        if t == "boolean":
            return (b"\x01" if value else b"\x00") if isinstance(value, bool) else None
        if t in ("int", "long", "date", "time", "timestamp", "timestamptz"):
            n = long_value(t, value)
            if n is None:
                return None
            if t in ("int", "date"):
                return struct.pack("<i", n) if _INT32[0] <= n <= _INT32[1] else None
            return struct.pack("<q", n) if _INT64[0] <= n <= _INT64[1] else None
        if t in ("float", "double"):
            if isinstance(value, bool) or not isinstance(value, int | float):
                return None
            f = float(value)
            if math.isnan(f):
                return None
            if t == "double":
                return struct.pack("<d", f)
            b = struct.pack("<f", f)
            return b if struct.unpack("<f", b)[0] == f else None  # not a float32: none
        if t.startswith("decimal("):
            p, s = (int(x) for x in t[len("decimal(") : -1].split(","))
            if isinstance(value, bool) or not isinstance(value, int | Decimal):
                return None
            n = _unscaled(value, s)
            if n is None or abs(n) >= 10**p:
                return None
            return n.to_bytes((n if n >= 0 else ~n).bit_length() // 8 + 1, "big", signed=True)
        if t == "string":
            return value.encode("utf-8") if isinstance(value, str) else None
        if t == "uuid":
            if isinstance(value, UUID):
                return value.bytes
            return bytes(value) if isinstance(value, bytes) and len(value) == 16 else None
        if t == "binary":
            return bytes(value) if isinstance(value, bytes | bytearray | memoryview) else None
        if t.startswith("fixed["):
            if not isinstance(value, bytes | bytearray | memoryview):
                return None
            return bytes(value) if len(value) == int(t[len("fixed[") : -1]) else None
    except (ValueError, OverflowError, ArithmeticError, struct.error, UnicodeError):
        return None
    return None


def long_value(t: str, value: Any) -> int | None:
    """The integer Iceberg stores for an int/long/date/time/timestamp value: days of
    a date, microseconds of a time or timestamp (naive: UTC); None if not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if t == "date" and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.toordinal() - _EPOCH_DAY
    if t == "time" and isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 10**6 + value.microsecond
    if t in ("timestamp", "timestamptz") and isinstance(value, dt.datetime):
        epoch = _EPOCH if value.tzinfo is None else _EPOCH_TZ
        return (value - epoch) // dt.timedelta(microseconds=1)
    return None


# -- column metrics -----------------------------------------------------------------------------
def _temporal_long(raw: Any, t: pa.DataType, upper: bool) -> int | None:
    """A stored temporal bound in Iceberg's unit (days of a date, else microseconds)."""
    per_ns = _NS_PER_DAY if pa.types.is_date(t) else _NS_PER_US
    if isinstance(raw, list) and len(raw) == 2 and raw[0] == "n":
        ns = raw[1]
        if isinstance(ns, bool) or not isinstance(ns, int):
            return None
        return -(-ns // per_ns) if upper else ns // per_ns
    s = stat_scalar(raw, t, upper=upper)
    if s is None:
        return None
    n = s.value
    if not isinstance(n, int):
        return None
    if pa.types.is_date32(t):
        return n
    if pa.types.is_date64(t):
        return -(-n // 86_400_000) if upper else n // 86_400_000
    return int(n * _US_PER[t.unit])


def _bound(raw: Any, t: pa.DataType, ice: str, upper: bool) -> bytes | None:
    if raw is None:
        return None
    if ice in ("date", "time", "timestamp", "timestamptz"):
        return bound_bytes(ice, _temporal_long(raw, t, upper))
    if type(raw) is int and ice in ("int", "long"):
        v: Any = raw  # bound_bytes checks the range
    elif type(raw) is str and ice == "string":
        v = raw
    else:
        s = stat_scalar(raw, t, upper=upper)
        if s is None:
            return None
        v = s.as_py()
    if ice == "string" and isinstance(v, str) and any(c > "\ud7ff" for c in v):
        return None  # code point and UTF-16 orders may differ: see the module docstring
    if ice in ("float", "double") and isinstance(v, float) and v == 0:
        v = 0.0 if upper else -0.0  # a zero bound covers both zeros
    return bound_bytes(ice, v)


@lru_cache(maxsize=64)
def _primitives(
    columns: tuple[Column, ...], schema: pa.Schema
) -> dict[int, tuple[pa.DataType, str]]:
    """Arrow and Iceberg type by id of the top-level primitive columns of the Iceberg
    schema (cached: a table's files share their columns)."""
    out = {}
    for cid, t in _supported(columns, schema).items():
        ice = primitive_type(t)
        if ice is not None:
            out[cid] = (t, ice)
    return out


def file_metrics(f: DataFile, columns: Sequence[Column], schema: pa.Schema) -> dict[str, Any]:
    """The column metrics of data file ``f`` for its manifest entry:
    ``value_counts``, ``null_value_counts``, ``lower_bounds``, ``upper_bounds``,
    each a list of ``{"key": field id, "value": ...}`` in id order.

    Only top-level primitive columns of the Iceberg schema that the file holds get
    metrics (value count: the file's rows, nulls included); bounds come from the
    file's record and are left out when unknown or unsafe (see the module docstring).
    """
    prims = _primitives(tuple(columns), schema)
    held = sorted({cid for cid, _ in f.columns if cid in prims})
    raw = {cid: (lo, hi, nulls) for cid, lo, hi, nulls in f.raw_stats}
    values, nulls_out, lower, upper = [], [], [], []
    for cid in held:
        values.append({"key": cid, "value": f.record_count})
        if cid not in raw:
            continue
        lo, hi, nulls = raw[cid]
        t, ice = prims[cid]
        if isinstance(nulls, int) and not isinstance(nulls, bool) and nulls >= 0:
            nulls_out.append({"key": cid, "value": nulls})
        b = _bound(lo, t, ice, False)
        if b is not None:
            lower.append({"key": cid, "value": b})
        b = _bound(hi, t, ice, True)
        if b is not None:
            upper.append({"key": cid, "value": b})
    return {
        "value_counts": values,
        "null_value_counts": nulls_out,
        "lower_bounds": lower,
        "upper_bounds": upper,
    }


# -- partition specs ----------------------------------------------------------------------------
def _result_type(pf: PartitionField, source: str) -> str:
    name = pf.transform.name
    if name in ("identity", "truncate"):
        return source
    return "date" if name == "day" else "int"  # pyiceberg's DayTransform.result_type: date


def _kept(
    spec: PartitionSpec, columns: Sequence[Column] | None, schema: pa.Schema | None
) -> Iterator[tuple[PartitionField, str | None]]:
    """The fields of ``spec`` Iceberg can describe, with their source's Iceberg type:
    all of them (type None) when no columns are given, else those whose source
    column is a primitive of the Iceberg schema."""
    if columns is None or schema is None:
        yield from ((pf, None) for pf in spec.fields)
        return
    types = {c.id: t for c, t in ((c, schema.field(c.name).type) for c in columns)}
    for pf in spec.fields:
        t = types.get(pf.source_id)
        ice = None if t is None or not 0 < pf.source_id < NESTED_BASE else primitive_type(t)
        if ice is not None:
            yield pf, ice


def partition_type(
    spec: PartitionSpec, columns: Sequence[Column], schema: pa.Schema
) -> list[dict[str, Any]]:
    """The partition fields of ``spec`` as manifests declare them:
    ``[{"field-id", "name", "type"}]`` (types as pyiceberg's transforms give them:
    identity and truncate the source's, day ``date``, the others ``int``). A
    field whose source column is not in the Iceberg schema (dropped, or of a type
    Iceberg cannot hold) is left out, here and in :func:`partition_spec_json` and
    :func:`partition_record` given the same columns."""
    return [
        {"field-id": pf.field_id, "name": pf.name, "type": _result_type(pf, ice or "")}
        for pf, ice in _kept(spec, columns, schema)
    ]


def partition_spec_json(
    spec: PartitionSpec,
    columns: Sequence[Column] | None = None,
    schema: pa.Schema | None = None,
) -> dict[str, Any]:
    """``{"spec-id", "fields": [{"source-id", "field-id", "name", "transform"}]}``
    (with ``columns`` and ``schema``: only the fields :func:`partition_type` keeps)."""
    return {
        "spec-id": spec.spec_id,
        "fields": [
            {
                "source-id": pf.source_id,
                "field-id": pf.field_id,
                "name": pf.name,
                "transform": str(pf.transform),
            }
            for pf, _ in _kept(spec, columns, schema)
        ],
    }


def partition_record(
    spec: PartitionSpec,
    f: DataFile,
    columns: Sequence[Column],
    schema: pa.Schema,
    values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``f``'s partition as the manifest's Avro record: field name -> value of the
    field's Iceberg type as fastavro takes it (int for int, date (days), year/month/
    hour/bucket; microseconds for time and timestamps; Decimal, str, bytes, float,
    bool as they are). ``values``: the partition by field name (default
    ``f.partition``, which ``list_data_files`` fills)."""
    given = f.partition if values is None else values
    out: dict[str, Any] = {}
    for pf, ice in _kept(spec, columns, schema):
        rtype = _result_type(pf, ice or "")
        out[pf.name] = _avro_value(rtype, given.get(pf.name), pf.name)
    return out


def _avro_value(t: str, v: Any, name: str) -> Any:
    if v is None:
        return None
    if t in ("int", "long", "date", "time", "timestamp", "timestamptz"):
        n = long_value(t, v)
        if n is None:
            raise ValueError(f"partition field {name!r}: {v!r} is not a {t} value")
        return n
    if t.startswith("decimal("):
        s = int(t[len("decimal(") : -1].split(",")[1])
        n = _unscaled(v, s)
        if n is None:
            raise ValueError(f"partition field {name!r}: {v!r} is not a {t} value")
        return Decimal(n).scaleb(-s)
    if t in ("float", "double"):
        return float(v)
    return v


# -- sort orders ---------------------------------------------------------------------------------
def sort_orders(d: TableDef) -> tuple[list[dict[str, Any]], int]:
    """The table's sort orders and the default one's id: order 0 unsorted; with sort
    keys, order 1 sorts by each (identity, ascending, nulls first), up to the first
    key Iceberg cannot describe (a sort on fewer leading keys still holds)."""
    orders: list[dict[str, Any]] = [{"order-id": 0, "fields": []}]
    ids = d.column_ids()
    fields = []
    for key in d.sort_keys:
        cid = ids.get(key)
        if cid is None or not 0 < cid < NESTED_BASE:
            break
        if primitive_type(d.schema.field(key).type) is None:
            break
        fields.append(
            {
                "transform": "identity",
                "source-id": cid,
                "direction": "asc",
                "null-order": "nulls-first",
            }
        )
    if not fields:
        return orders, 0
    orders.append({"order-id": 1, "fields": fields})
    return orders, 1


__all__ = [
    "MAX_NESTED_COLUMN_ID",
    "NAME_MAPPING_PROPERTY",
    "NESTED_BASE",
    "NESTED_SPAN",
    "OMITTED_PROPERTY",
    "UnsupportedColumn",
    "bound_bytes",
    "column_type",
    "field_ids_schema",
    "file_metrics",
    "iceberg_schema",
    "long_value",
    "name_mapping",
    "nested_id",
    "partition_record",
    "partition_spec_json",
    "partition_type",
    "primitive_type",
    "readable_rows",
    "readable_type",
    "schema_id",
    "sort_orders",
]
