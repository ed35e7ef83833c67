"""Turning lakehouse objects into text tables and JSON documents.

Text is for people: aligned columns, nulls shown as ``null``, long or
multi-line cells escaped and cut so one row is one line. JSON is exact:
decimals as strings, times in ISO 8601, binary as hex, NaN and infinities as
strings (JSON has no such numbers).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections.abc import Sequence
from typing import Any, cast

import pyarrow as pa

from kvstore.cli.codec import escape
from lakehouse.model import DATA_OPS, DataFile, ObjectChange, TableDef, VersionInfo, ViewDef
from lakehouse.partition import PartitionSpec
from lakehouse.reads import ReadOps

#: longest cell shown in text tables (``--wide`` shows everything)
MAX_CELL = 40


# ---------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------
def json_value(v: Any) -> Any:
    """One value of a row or a column bound, as exact JSON."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        if len(v) and all(isinstance(x, tuple) and len(x) == 2 for x in v):  # an Arrow map
            return {str(k): json_value(x) for k, x in v}
        return [json_value(x) for x in v]
    return str(v)


def cell(v: Any, *, width: int | None = MAX_CELL) -> str:
    """One value for a text table: ``null``, escaped, at most ``width`` characters."""
    if v is None:
        text = "null"
    elif isinstance(v, bool):
        text = "true" if v else "false"
    elif isinstance(v, str):
        text = escape(v.encode("utf-8", "surrogatepass"))
    elif isinstance(v, (bytes, bytearray, memoryview)):
        text = escape(bytes(v))
    elif isinstance(v, dt.datetime):
        text = v.isoformat(sep=" ")
    elif isinstance(v, (dict, list, tuple)):
        text = json.dumps(json_value(v), ensure_ascii=False)
    else:
        text = str(v)
    if width is not None and len(text) > width:
        text = text[: max(width - 1, 1)] + "…"
    return text


def _numeric(t: pa.DataType) -> bool:
    return cast(bool, pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def table_text(
    rows: Sequence[Sequence[Any]], header: Sequence[str], *, right: Sequence[bool] = ()
) -> str:
    """Aligned columns under a header and a rule; ``right[i]`` right-aligns column i."""
    cells = [list(header)] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    align = list(right) + [False] * (len(header) - len(right))

    def fmt(r: list[str]) -> str:
        parts = [c.rjust(w) if a else c.ljust(w) for c, w, a in zip(r, widths, align)]
        return "  ".join(parts).rstrip()

    lines = [fmt(r) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def arrow_text(t: pa.Table, *, width: int | None = MAX_CELL) -> str:
    """Rows of an Arrow table as a text table."""
    rows = [[cell(v, width=width) for v in r.values()] for r in t.to_pylist()]
    right = [_numeric(f.type) for f in t.schema]
    return table_text(rows, t.column_names, right=right)


def arrow_json(t: pa.Table) -> list[dict[str, Any]]:
    return [{k: json_value(v) for k, v in r.items()} for r in t.to_pylist()]


# ---------------------------------------------------------------------------
# definitions and versions
# ---------------------------------------------------------------------------
def table_json(d: TableDef) -> dict[str, Any]:
    return {
        "kind": "table",
        "name": d.qualified_name,
        "table_id": d.table_id,
        "columns": [
            {"id": c.id, "name": c.name, "type": c.type, "nullable": c.nullable} for c in d.columns
        ],
        "properties": dict(d.properties),
        "primary_key": list(d.primary_key),
        "sort_keys": list(d.sort_keys),
        "partition_by": list(spec_spelling(d, d.spec)),
        "spec_id": d.spec_id,
        "partition_specs": [
            {
                "spec_id": s.spec_id,
                "partition_by": list(spec_spelling(d, s)),
                "fields": [
                    {
                        "name": f.name,
                        "field_id": f.field_id,
                        "source_id": f.source_id,
                        "transform": f.transform.name,
                        "param": f.transform.param,
                    }
                    for f in s.fields
                ],
            }
            for s in (d.partition_specs or (d.spec,))
        ],
        "format": d.format,
    }


def spec_spelling(d: TableDef, spec: PartitionSpec) -> tuple[str, ...]:
    """A partition spec as ``partition_by`` spells it (``("day(ts)", "country")``);
    source columns dropped since show as ``#<column id>``."""
    names = d.names_by_id
    try:
        return tuple(spec.spelling(names))
    except (KeyError, NotImplementedError):
        out = []
        for f in spec.fields:
            col = names.get(f.source_id, f"#{f.source_id}")
            t = f.transform
            if t.name == "identity":
                out.append(col)
            elif t.param is not None:
                out.append(f"{t.name}({t.param}, {col})")
            else:
                out.append(f"{t.name}({col})")
        return tuple(out)


def view_json(d: ViewDef) -> dict[str, Any]:
    return {
        "kind": "view",
        "name": d.qualified_name,
        "sql": d.sql,
        "referenced": list(d.referenced),
        "properties": dict(d.properties),
        "dialect": d.dialect,
    }


def version_json(v: VersionInfo) -> dict[str, Any]:
    return {
        "version": v.version,
        "created_at": v.created_at.isoformat(),
        "created_ms": v.created_ms,
        "parent": v.parent,
        "isolation": v.isolation.value,
        "txn": v.txn_id,
        "changes": [
            {"kind": c.kind, "name": c.name, "op": c.op, "old_id": c.old_id, "new_id": c.new_id}
            for c in v.changes
        ],
        "data": [
            {
                "table": c.table,
                "ops": list(c.ops),
                "files_added": len(c.added),
                "files_removed": len(c.removed),
                "files_with_new_deletes": len(c.deleted),
            }
            for c in v.data
        ],
        "rollback_of": v.rollback_of,
        "source": v.source,
        "app": None if v.app is None else {"app_id": v.app[0], "app_version": v.app[1]},
    }


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _summed_below(c: ObjectChange, data_tables: set[str]) -> bool:
    """A table's data operation (or the unchanged-definition "alter" an older record
    stores for one), summed up per table by :func:`version_summary`."""
    if c.kind != "table" or c.name not in data_tables:
        return False
    return c.op in DATA_OPS or (c.op == "alter" and c.old_id == c.new_id)


def version_summary(v: VersionInfo) -> str:
    """What a version changed, in one line: objects, then rows per table."""
    data_tables = {c.table for c in v.data}
    items = [str(c) for c in v.changes if not _summed_below(c, data_tables)]
    for c in v.data:
        detail = []
        if c.added:
            detail.append(f"+{_files(len(c.added))}")
        if c.removed:
            detail.append(f"-{_files(len(c.removed))}")
        if c.deleted:
            detail.append(f"rows deleted in {_files(len(c.deleted))}")
        ops = "/".join(c.ops) or "data change"
        items.append(f"{ops} {c.table}" + (f" ({', '.join(detail)})" if detail else ""))
    body = ", ".join(items) or "no changes"
    if v.rollback_of is not None:
        body = f"rollback to version {v.rollback_of}: {body}"
    elif v.source is not None:
        body = f"export of version {v.source.get('version')}: {body}"
    if v.app is not None:
        body += f" (app {v.app[0]} #{v.app[1]})"
    return body


def history_text(hist: list[VersionInfo]) -> str:
    rows = [
        [
            v.version,
            v.created_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
            v.isolation.value,
            version_summary(v),
        ]
        for v in hist
    ]
    return table_text(rows, ["version", "created_at (UTC)", "isolation", "changes"], right=[True])


def tree(view: ReadOps) -> dict[str, Any]:
    return {
        ns: {
            "properties": dict(view.describe_namespace(ns).properties),
            "tables": view.list_tables(ns),
            "views": view.list_views(ns),
        }
        for ns in view.list_namespaces()
    }


def tree_text(t: dict[str, Any]) -> str:
    if not t:
        return "(no namespaces)"
    lines = []
    for ns, body in t.items():
        props = " ".join(f"{k}={v}" for k, v in body["properties"].items())
        lines.append(f"{ns}/" + (f"  [{props}]" if props else ""))
        for name in body["tables"]:
            lines.append(f"  {name}  (table)")
        for name in body["views"]:
            lines.append(f"  {name}  (view)")
    return "\n".join(lines)


def _layout_lines(obj: dict[str, Any]) -> list[str]:
    """``partition by`` (and earlier specs, whose files keep them) and ``sort keys``."""
    lines = []
    specs = obj.get("partition_specs", [])
    if obj.get("partition_by") or len(specs) > 1:
        by = ", ".join(obj["partition_by"]) or "nothing (unpartitioned)"
        lines.append(f"partition by: {by} (spec {obj['spec_id']})")
        earlier = [
            f"{s['spec_id']}: {', '.join(s['partition_by']) or 'unpartitioned'}"
            for s in specs
            if s["spec_id"] != obj["spec_id"]
        ]
        if earlier:
            lines.append(f"earlier partition specs (their files keep them): {'; '.join(earlier)}")
    if obj["sort_keys"]:
        lines.append(f"sort keys: {', '.join(obj['sort_keys'])}")
    return lines


def describe_text(obj: dict[str, Any]) -> str:
    lines = [f"{obj['kind']} {obj['name']}"]
    if obj["kind"] == "table":
        lines.append(
            table_text(
                [
                    [c["id"], c["name"], c["type"], "" if c["nullable"] else "not null"]
                    for c in obj["columns"]
                ],
                ["id", "column", "type", ""],
            )
        )
        if obj["primary_key"]:
            lines.append(f"primary key: {', '.join(obj['primary_key'])}")
        lines += _layout_lines(obj)
        lines.append(f"format: {obj['format']}")
    elif obj["kind"] == "view":
        lines.append(f"sql: {obj['sql']}")
        if obj["referenced"]:
            lines.append(f"reads: {', '.join(obj['referenced'])}")
    for k, v in obj.get("properties", {}).items():
        lines.append(f"  {k} = {v}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# data files
# ---------------------------------------------------------------------------
def data_file_json(f: DataFile) -> dict[str, Any]:
    return {
        "path": f.path,
        "rows": f.rows,
        "deleted_rows": f.deleted_rows,
        "live_rows": f.live_rows,
        "bytes": f.bytes,
        "inline": f.is_inline,
        "columns": {
            name: {
                "min": json_value(s.min),
                "max": json_value(s.max),
                "null_count": s.null_count,
            }
            for name, s in f.stats.items()
        },
    }


def data_file_lines(f: DataFile, size: str, *, partition: str | None = None) -> list[str]:
    deleted = f" ({f.deleted_rows} deleted)" if f.deleted_rows else ""
    lines = [f.path + (" (inline: rows kept in the kvstore)" if f.is_inline else "")]
    if partition is not None:
        lines.append(f"  partition {partition}")
    lines.append(f"  rows {f.rows}{deleted}, {size}")
    if f.stats:
        rows = [
            [
                name,
                cell(s.min, width=24),
                cell(s.max, width=24),
                "?" if s.null_count is None else s.null_count,
            ]
            for name, s in f.stats.items()
        ]
        table = table_text(
            rows, ["column", "min", "max", "nulls"], right=[False, False, False, True]
        )
        lines += ["  " + line for line in table.splitlines()]
    return lines
