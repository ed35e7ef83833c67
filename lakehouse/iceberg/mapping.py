"""How Iceberg readers find the columns of the lakehouse's data files: the name
mapping, Parquet field ids, and the column types every reader reads.

**Name mapping.** Data files carry no Parquet field ids, so readers find a
file's columns by name (``schema.name-mapping.default``): every id lists every
name a live file uses for it and its current name; nested fields list the
Arrow child names (a list's element also as ``element``, a map's key and value
as ``key``/``value``, the Parquet names). A name two ids claim (a column
dropped and another added under its name, or two columns that swapped names)
stays with the column whose current name it is, else with the newest id;
files that use it for the other id are rewritten with field ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from lakehouse.data.rows import plain_type
from lakehouse.iceberg.typemap import (
    IcebergType,
    Node,
    UnsupportedColumn,
    column_type,
    nested_id,
    nodes_for,
    primitive_type,
    tree,
)
from lakehouse.model import Column


def _mapped(cid: int, nodes: Sequence[Node]) -> list[dict[str, Any]]:
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
                nodes = nodes_for(cid, t, f"#{cid}")
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


def _typed_ids(t: pa.DataType, cid: int, nodes: Sequence[Node]) -> pa.DataType:
    if not nodes:
        return t

    def child(n: Node) -> pa.Field:
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
            nodes = tree(f.type)
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
        return _READABLE.get(t) or plain_type(t)  # a view type: its large non-view type
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
