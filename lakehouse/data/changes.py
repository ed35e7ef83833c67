"""The change feed: the rows whose visible state a range of versions changed.

Built from what versions already keep: each version record lists, per table
(by table id), the files it added, the files it removed, the positions it
newly deleted, and which of those deletions and added files were an update's
(:class:`~lakehouse.model.TableChange` ``updated`` and ``post``). For version
``u`` and one table:

==================  ====================================================================
``_change_type``    rows
==================  ====================================================================
insert              rows of files ``u`` added, live at ``u``, not an update's new versions
update_postimage    rows of the files ``u`` added as an update's or merge update's new rows
update_preimage     rows at the positions ``u`` deleted as replaced by an update or merge
delete              rows at the other positions ``u`` newly deleted, and the live rows
                    (as of ``u - 1``) of files ``u`` removed whole
(nothing)           rows a compaction moved (its outputs and sources are skipped)
==================  ====================================================================

A row appended and deleted (or updated) by the same version never existed
outside it: only its final state shows, as an insert. ``restore_table``
re-adds files and drops others; rows that are visible before and after it
with the same values cancel out (as a multiset), so it reports exactly the
rows whose visibility changed, even when a compaction moved them meanwhile.

A table is followed by its table id, so a rename is followed and a table
dropped and created again under the same name is another table: its changes
start at its creation. Rows come out in the table's schema as of
``end_version`` (columns matched by id), with ``_change_type`` and
``_version`` columns appended. Versions recorded before table ids were kept
are matched by the table's name at that version, and its id checked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
from pyroaring import BitMap

from lakehouse.data import dv as dvfmt
from lakehouse.data import scan
from lakehouse.data.rewrites import output_ids
from lakehouse.data.rows import filter_rows
from lakehouse.data.table import FileState
from lakehouse.errors import NotFound
from lakehouse.model import DataOp, TableChange, TableDef, split_qualified

if TYPE_CHECKING:
    from lakehouse.context import Context

INSERT, DELETE = "insert", "delete"
PRE, POST = "update_preimage", "update_postimage"


def _files(ctx: Context, version: int, name: str, table_id: str) -> dict[str, FileState]:
    """The files of table ``table_id`` at ``version`` ({} where it does not exist);
    ``name`` is where it is looked for first (then every table is looked at)."""
    from lakehouse.data.table import file_key_id

    if version < 1:
        return {}
    with ctx.at_version(version) as v:
        where = None
        if v.table_exists(name):
            d = v.describe_table(name)
            if isinstance(d, TableDef) and d.table_id == table_id:
                where = (d.namespace, d.name)
        if where is None:  # renamed in this very version, or not there at all
            for ns in v.list_namespaces():
                for t in v.list_tables(ns):
                    d = v.describe_table(f"{ns}.{t}")
                    if isinstance(d, TableDef) and d.table_id == table_id:
                        where = (ns, t)
        if where is None:
            return {}
        return {file_key_id(f): (f, dv) for f, dv in v.file_states(".".join(where))}


def changes(ctx: Context, table: str, start: int, end: int | None = None) -> pa.Table:
    ctx.check_open()
    for name, v in (("start_version", start), ("end_version", end)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"{name} must be an int")
    head = ctx.head()
    end = head if end is None else end
    if start < 1 or end < start:
        raise ValueError(f"need 1 <= start_version <= end_version, got {start}..{end}")
    if end > head:
        raise NotFound(f"version {end} does not exist; the latest is {head}")
    split_qualified(table, "table name", ctx.name_limit)
    with ctx.at_version(end) as view:
        d = view.describe_table(table)
    assert isinstance(d, TableDef)
    schema = scan.output_schema(d, list(d.columns))
    out_schema = schema.append(pa.field("_change_type", pa.string())).append(
        pa.field("_version", pa.int64())
    )
    parts: list[pa.Table] = []
    for u in range(start, end + 1):
        rec = ctx.version_info(u)
        for c in rec.data:
            if c.table_id and c.table_id != d.table_id:
                continue
            if not c.table_id and c.table != d.qualified_name:
                continue  # an older record: matched by name (its id is checked below)
            now = _files(ctx, u, c.table, d.table_id)
            if not now and not c.table_id and c.added:
                continue  # that name held another table at u
            before = _files(ctx, u - 1, c.table, d.table_id)
            found = list(_version_rows(ctx, d, c, before, now))
            if DataOp.RESTORE in c.ops:
                found = _net(found)
            parts.extend(_tag(rows, schema, kind, u) for kind, rows in found if rows.num_rows)
    if not parts:
        return out_schema.empty_table()
    return pa.concat_tables(parts)


def _version_rows(
    ctx: Context,
    d: TableDef,
    c: TableChange,
    before: dict[str, FileState],
    now: dict[str, FileState],
) -> Iterator[tuple[str, pa.Table]]:
    """``(change type, rows)`` for what one version's change ``c`` did to table ``d``."""
    store = ctx.data
    cols = list(d.columns)

    def rows(fs: FileState) -> pa.Table:
        return scan.read_one(store, d, fs, cols, None, cols)

    moved_out = output_ids(c.rewrites)
    moved_in = {fid for r in c.rewrites for fid, _, _ in r.sources}
    post = set(c.post)
    for fid in c.added:
        if fid in moved_out or fid not in now:
            continue
        if fid in before and fid not in c.removed:  # re-added (restore): what changed in it
            f, dv_now = now[fid]
            dv_before = before[fid][1]
            everything = BitMap(range(f.record_count))
            if dv_before - dv_now:
                yield INSERT, rows((f, everything - (dv_before - dv_now)))
            if dv_now - dv_before:
                yield DELETE, rows((f, everything - (dv_now - dv_before)))
            continue
        yield (POST if fid in post else INSERT), rows(now[fid])
    for fid, raw in c.deleted.items():
        if fid not in before:
            continue
        f, _ = before[fid]
        gone = dvfmt.decode(raw)
        replaced = dvfmt.decode(c.updated[fid]) if fid in c.updated else BitMap()
        everything = BitMap(range(f.record_count))
        if replaced:
            yield PRE, rows((f, everything - (gone & replaced)))
        if gone - replaced:
            yield DELETE, rows((f, everything - (gone - replaced)))
    for fid in c.removed:
        if fid in moved_in or fid not in before:
            continue
        yield DELETE, rows(before[fid])


def _net(found: list[tuple[str, pa.Table]]) -> list[tuple[str, pa.Table]]:
    """Inserted and deleted rows with equal values cancel out (as a multiset)."""
    ins = [t for k, t in found if k == INSERT]
    dels = [t for k, t in found if k == DELETE]
    if not ins or not dels:
        return found
    inserted, deleted = pa.concat_tables(ins), pa.concat_tables(dels)
    left = Counter(_key(r) for r in deleted.to_pylist()) & Counter(
        _key(r) for r in inserted.to_pylist()
    )
    if not left:
        return found

    def keep(t: pa.Table) -> pa.Table:
        todo = Counter(left)
        mask = []
        for r in t.to_pylist():
            k = _key(r)
            if todo[k] > 0:
                todo[k] -= 1
                mask.append(False)
            else:
                mask.append(True)
        return filter_rows(t, pa.array(mask, pa.bool_()))

    rest = [(k, t) for k, t in found if k not in (INSERT, DELETE)]
    return [*rest, (INSERT, keep(inserted)), (DELETE, keep(deleted))]


def _key(row: dict[str, object]) -> str:
    return repr(tuple(row.values()))


def _tag(rows: pa.Table, schema: pa.Schema, kind: str, version: int) -> pa.Table:
    rows = rows.cast(schema)
    n = rows.num_rows
    return rows.append_column("_change_type", pa.array([kind] * n, pa.string())).append_column(
        "_version", pa.array([version] * n, pa.int64())
    )
