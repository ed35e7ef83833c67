"""The change feed: rows inserted and deleted by a range of versions.

Built from what versions already keep, nothing extra is written: each
version record lists, per table, the files it added, the files it removed
and the positions it newly deleted (:class:`~lakehouse.model.TableChange`).
For version ``u``:

* **inserted** rows are the rows of the files ``u`` added that are live at
  ``u`` (a row appended and deleted by the same version never existed);
* **deleted** rows are the rows at the positions ``u`` newly deleted, read
  from the (immutable) files as of ``u - 1``, plus the live rows of files
  ``u`` removed whole;
* rows a compaction moved are neither: its outputs and sources are skipped.

An update shows as a delete of the old row and an insert of the new one,
as in Delta's change data feed. Rows come out in the table's schema as of
``end_version`` (columns matched by id, so renames are followed), with
``_change_type`` and ``_version`` columns appended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from pyroaring import BitMap

from lakehouse.data import dv as dvfmt
from lakehouse.data import scan
from lakehouse.data.table import FileState
from lakehouse.errors import NotFound
from lakehouse.model import TableDef, split_qualified

if TYPE_CHECKING:
    from lakehouse.services import LakehouseServices


def _files(lh: LakehouseServices, version: int, ns: str, t: str) -> dict[str, FileState]:
    from lakehouse.data.table import file_key_id

    with lh.at_version(version) as v:
        if not v.table_exists(f"{ns}.{t}"):
            return {}
        return {file_key_id(f): (f, dv) for f, dv in v._table_files(ns, t)}


def changes(lh: LakehouseServices, table: str, start: int, end: int | None = None) -> pa.Table:
    lh._check_open()
    for name, v in (("start_version", start), ("end_version", end)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"{name} must be an int")
    head = lh.version
    end = head if end is None else end
    if start < 1 or end < start:
        raise ValueError(f"need 1 <= start_version <= end_version, got {start}..{end}")
    if end > head:
        raise NotFound(f"version {end} does not exist; the latest is {head}")
    ns, t = split_qualified(table, "table name", lh.definition.max_name_length)
    with lh.at_version(end) as view:
        d = view.describe_table(table)
    assert isinstance(d, TableDef)
    cols = list(d.columns)
    schema = scan.output_schema(d, cols)
    out_schema = schema.append(pa.field("_change_type", pa.string())).append(
        pa.field("_version", pa.int64())
    )
    parts: list[pa.Table] = []
    store = lh._data
    for u in range(start, end + 1):
        rec = lh.version_info(u)
        mine = [c for c in rec.data if c.table == d.qualified_name]
        if not mine:
            continue
        now = _files(lh, u, ns, t)
        before = _files(lh, u - 1, ns, t)
        for c in mine:
            moved_out = {r.new_id for r in c.rewrites}
            moved_in = {fid for r in c.rewrites for fid, _, _ in r.sources}
            for fid in c.added:
                if fid in moved_out or fid not in now:
                    continue
                rows = scan._one(store, d, now[fid], cols, None, cols)
                parts.append(_tag(rows, schema, "insert", u))
            for fid, raw in c.deleted.items():
                if fid not in before:
                    continue
                f, _ = before[fid]
                keep_only = BitMap(range(f.record_count)) - dvfmt.decode(raw)
                rows = scan._one(store, d, (f, keep_only), cols, None, cols)
                parts.append(_tag(rows, schema, "delete", u))
            for fid in c.removed:
                if fid in moved_in or fid not in before:
                    continue
                rows = scan._one(store, d, before[fid], cols, None, cols)
                parts.append(_tag(rows, schema, "delete", u))
    if not parts:
        return out_schema.empty_table()
    return pa.concat_tables(parts)


def _tag(rows: pa.Table, schema: pa.Schema, kind: str, version: int) -> pa.Table:
    rows = rows.cast(schema)
    n = rows.num_rows
    return rows.append_column("_change_type", pa.array([kind] * n, pa.string())).append_column(
        "_version", pa.array([version] * n, pa.int64())
    )
