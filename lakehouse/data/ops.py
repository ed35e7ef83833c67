"""Table data operations inside a transaction (Lance's operations, on Parquet).

Every operation reads the table as the transaction sees it (its begin
version plus its own earlier changes), writes new Parquet files at once
(durable, never-repeating names) and buffers the rest in the table's
:class:`~lakehouse.data.table.TableWrite`:

============== ==============================================================
append         new files
overwrite      all rows: remove every file, add new ones; ``where``: delete
               the matching rows (deletion vectors), add new rows, all of
               which must match ``where``
delete         deletion vectors only; no file is rewritten
update         delete the matched rows, add their new versions in a new file
replace_rows   as update, for rows named by (data file, position) with their
               new versions given (Spark's update and merge)
merge          by key columns: matched rows updated (or deleted / kept),
               unmatched source rows inserted; duplicate source keys refused
               (:mod:`lakehouse.data.merge`)
compact        per partition: rewrite small files and files with deleted rows,
               clustered by the sort keys (:mod:`lakehouse.data.compaction`),
               recording where every moved row went (concurrent deletes follow it)
restore_table  the table's definition, files and deletion vectors of a
               version, as a new change
clone_table    a new table sharing the source's files (no copy)
============== ==============================================================

Each is a function over the transaction's
:class:`~lakehouse.data.buffer.TableData` (its public members only). The
conflicts each one can meet at commit are in :mod:`lakehouse.conflicts` (the
matrix) and :mod:`lakehouse.data.rebase` (the per-row checks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from typing import Any, cast

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lakehouse.data import dv as dvfmt
from lakehouse.data import keyindex, partitioning, scan
from lakehouse.data.buffer import TableData
from lakehouse.data.conform import conform, to_table
from lakehouse.data.literals import ARROW_ERRORS, first_line
from lakehouse.data.predicate import Predicate, evaluate, matches, parse_value, parse_where
from lakehouse.data.rows import filter_rows
from lakehouse.data.table import Origins, TableWrite, concat_origins, file_key_id
from lakehouse.model import DataOp, TableDef

#: the operations ``delete_rows`` can record (those that delete rows by position)
ROW_DELETING = (DataOp.DELETE, DataOp.UPDATE, DataOp.MERGE, DataOp.OVERWRITE)

#: rows per data file written by append/update/merge/overwrite
ROWS_PER_FILE = 1_000_000


def write_rows(
    buf: TableData,
    d: TableDef,
    rows: pa.Table,
    op: DataOp,
    *,
    origins: Origins | None = None,
    keys_checked: bool = False,
) -> int:
    """Write ``rows`` as new data files; ``origins``: they are new versions of rows an
    update or merge replaced (the change feed's post-images), one base row each;
    ``keys_checked``: the caller knows no live row has any of their primary keys
    (a merge that looked every key up in the index), so they are only indexed.
    A write of at most the table's ``inline.max_rows`` rows is inlined: its files
    are inline files, kept in the kvstore (:mod:`lakehouse.data.inline`)."""
    from lakehouse.data import inline

    w = buf.write(d.namespace, d.name)
    w.note(op)
    keyed = bool(d.primary_key)
    encs: list[bytes] | None = None
    if keyed:  # unique keys, or DuplicateKey before anything is written
        encs = keyindex.encode(d, rows) if keys_checked else keyindex.check_new(buf, d, w, rows)
        w.keys = d.primary_key  # a concurrent insert of one of them conflicts
        w.inserted.append(rows.select(list(d.primary_key)))
    small = 0 < rows.num_rows <= inline.max_rows(d)
    for values, part, idx in partitioning.arrange(d, rows):
        porig = origins if origins is None or idx is None else (origins[0][idx], origins[1][idx])
        for start in range(0, part.num_rows, ROWS_PER_FILE):
            chunk = part.slice(start, ROWS_PER_FILE)
            f = buf.write_file(d, chunk, w, values, inline=small)
            if keyed:
                same = idx is None and chunk.num_rows == rows.num_rows  # as written
                keyindex.note_rows(w, d, file_key_id(f), chunk, encs if same else None)
            if porig is not None:
                fid = file_key_id(f)
                w.post.add(fid)
                end = start + ROWS_PER_FILE
                w.origin[fid] = (porig[0][start:end], porig[1][start:end])
    return cast(int, rows.num_rows)


def append(buf: TableData, table: str, data: Any, on: Sequence[str] | None = None) -> int:
    d = buf.table(table)
    rows = conform(to_table(data), d.schema)
    op = DataOp.MERGE if on else DataOp.APPEND
    w = buf.write(d.namespace, d.name)
    w.note(op)
    if rows.num_rows == 0:
        return 0
    if on and not d.primary_key:  # a merge's inserts (a keyed table's writes list their keys)
        w.keys = tuple(on)
        w.inserted.append(rows.select(list(on)))
    return write_rows(buf, d, rows, op)


def _where(d: TableDef, where: Any, required: bool = True) -> Predicate | None:
    if where is None:
        if required:
            raise TypeError("where is required (a SQL string or a pyarrow.compute.Expression)")
        return None
    return parse_where(where, d.schema)


def _files_for(buf: TableData, d: TableDef, pred: Predicate | None) -> list[Any]:
    """The files rows matching ``pred`` may be in: through the primary-key index
    when ``pred`` fixes the key (cost follows the keys), else pruned by partition
    and bounds."""
    by_key = keyindex.files_for_keys(buf, d, pred)
    return buf.files_for(d, pred) if by_key is None else by_key


def _delete_matching(buf: TableData, d: TableDef, pred: Predicate | None, op: DataOp) -> int:
    """Mark the live rows matching ``pred`` deleted; returns how many."""
    files = _files_for(buf, d, pred)
    w = buf.write(d.namespace, d.name)
    w.note(op)
    n = 0
    by_path = {f.path: file_key_id(f) for f, _ in files}
    for f, hit in scan.matching_positions(buf.ctx.data, d, files, pred, columns=[]):
        pos = scan.positions_of(hit)
        if pos:
            w.delete(by_path[f.path], pos)
            n += len(pos)
    return n


def overwrite(buf: TableData, table: str, data: Any, where: Any = None) -> int:
    d = buf.table(table)
    rows = conform(to_table(data), d.schema)
    pred = _where(d, where, required=False)
    w = buf.write(d.namespace, d.name)
    w.note(DataOp.OVERWRITE)
    if pred is not None:
        ok = matches(rows, pred)
        bad = rows.num_rows - scan.count_true(ok)
        if bad:
            raise ValueError(
                f"{bad} of the {rows.num_rows} new rows do not match where {pred.text!r}; "
                "an overwrite with where may only write rows that match it"
            )
        _delete_matching(buf, d, pred, DataOp.OVERWRITE)
        w.guards.append(pred)
    else:
        for f, _ in buf.files(d.namespace, d.name):
            w.remove(file_key_id(f), f)
        w.guards.append(parse_where("TRUE", d.schema))
    buf.note_read(d, pred)
    if rows.num_rows:
        write_rows(buf, d, rows, DataOp.OVERWRITE)
    return cast(int, rows.num_rows)


def replace_partitions(buf: TableData, table: str, data: Any) -> int:
    """Replace every row of each partition ``data`` has rows in (Spark's dynamic
    partition overwrite); other partitions are untouched. Unpartitioned: overwrite."""
    d = buf.table(table)
    if d.spec.is_unpartitioned:
        return overwrite(buf, table, data)
    rows = conform(to_table(data), d.schema)
    w = buf.write(d.namespace, d.name)
    w.note(DataOp.OVERWRITE)
    if rows.num_rows == 0:
        return 0
    _clear_partitions(buf, d, w, [v for v, _ in partitioning.split(d, rows)])
    return write_rows(buf, d, rows, DataOp.OVERWRITE)


def _clear_partitions(
    buf: TableData,
    d: TableDef,
    w: TableWrite,
    targets: Sequence[tuple[Any, ...]],
    keep: Set[str] = frozenset(),
) -> None:
    """Delete every row of the current spec's partitions ``targets`` (except the files
    ``keep``, by file key id: the new ones) and guard them against concurrent inserts."""
    guard = partitioning.partition_match(d, targets)
    others = []
    for fs in buf.files_for(d, guard):
        if file_key_id(fs[0]) in keep:
            continue
        held = guard.holds(d, fs[0])
        if held:  # a file of a replaced partition: dropped whole
            w.remove(file_key_id(fs[0]), fs[0])
        elif held is None:  # a file of another spec: its rows in those partitions
            others.append(fs)
    for f, hit in scan.matching_positions(buf.ctx.data, d, others, guard, columns=[]):
        w.delete(file_key_id(f), scan.positions_of(hit))
    w.guards.append(guard)  # concurrent inserts into these partitions conflict
    buf.note_read(d, guard)


def delete(buf: TableData, table: str, where: Any) -> int:
    d = buf.table(table)
    pred = _where(d, where)
    buf.note_read(d, pred)
    return _delete_matching(buf, d, pred, DataOp.DELETE)


def update(buf: TableData, table: str, where: Any, values: Mapping[str, Any]) -> int:
    d = buf.table(table)
    pred = _where(d, where)
    if not isinstance(values, Mapping) or not values:
        raise TypeError("values must be a non-empty dict {column: SQL expression or value}")
    exprs = {}
    for col, value in values.items():
        if not isinstance(col, str):
            raise TypeError(f"values keys must be column names (str), not {type(col).__name__}")
        if d.schema.get_field_index(col) < 0:
            raise ValueError(f"table {d.qualified_name} has no column {col!r} to update")
        exprs[col] = parse_value(value, d.schema, d.schema.field(col))[0]
    buf.note_read(d, pred)
    files = _files_for(buf, d, pred)
    w = buf.write(d.namespace, d.name)
    w.note(DataOp.UPDATE)
    by_path = {f.path: file_key_id(f) for f, _ in files}
    parts: list[pa.Table] = []  # new versions of rows committed before (post-images)
    origins: list[Origins] = []  # the committed row each of those replaces
    fresh: list[pa.Table] = []  # of rows this transaction added: still inserts
    for f, hit in scan.matching_positions(buf.ctx.data, d, files, pred):
        if not hit.num_rows:
            continue
        old = hit.drop_columns(["_pos"])
        new_cols = []
        for field in d.schema:
            if field.name in exprs:
                try:  # an overflow, a division by zero, a value the cast cannot take
                    arr = evaluate(old, exprs[field.name])
                    new_cols.append(arr.cast(field.type) if arr.type != field.type else arr)
                except ARROW_ERRORS as exc:
                    raise ValueError(
                        f"cannot update column {field.name!r} of {d.qualified_name} to "
                        f"{values[field.name]!r}: {first_line(exc)}"
                    ) from None
            else:
                new_cols.append(old.column(field.name))
        fid = by_path[f.path]
        own = fid in w.added and fid not in w.post  # an earlier update's rows: still updates
        (fresh if own else parts).append(pa.Table.from_arrays(new_cols, names=d.schema.names))
        if not own:
            origins.append(w.origins_of(fid, hit.column("_pos").to_numpy()))
        w.delete(fid, scan.positions_of(hit), updated=not own)
    n = 0
    for group, post in ((parts, True), (fresh, False)):
        if group:
            rows = conform(pa.concat_tables(group), d.schema, "the updated rows")
            n += write_rows(
                buf, d, rows, DataOp.UPDATE, origins=concat_origins(origins) if post else None
            )
    return n


def replace_rows(buf: TableData, table: str, positions: Any, rows: Any, op: str = "update") -> int:
    """Replace live rows by position with new versions: ``rows[i]`` replaces the
    row at ``positions[i]`` (an Arrow table of ``path``, ``position``). The old rows
    are deleted as updated (pre-images), the new ones written with their origins
    (post-images); rows this transaction inserted itself stay inserts."""
    if op not in (DataOp.UPDATE, DataOp.MERGE):
        raise ValueError(f"op must be 'update' or 'merge', not {op!r}")
    d = buf.table(table)
    new = conform(to_table(rows, "rows"), d.schema, "rows")
    where = _row_positions(positions, new.num_rows)
    files = {f.path: (file_key_id(f), f, dv) for f, dv in buf.files(d.namespace, d.name)}
    w = buf.write(d.namespace, d.name)
    w.note(DataOp(op))
    if new.num_rows == 0:
        return 0
    paths = where.column("path").dictionary_encode().combine_chunks()
    codes = paths.indices.to_numpy(zero_copy_only=False)
    pos = where.column("position").to_numpy()
    own = np.zeros(len(pos), dtype=bool)  # rows of files this transaction inserted
    ocode = np.zeros(len(pos), dtype=np.int32)
    opos = np.zeros(len(pos), dtype=np.int64)
    deletes: list[tuple[str, BitMap, bool]] = []
    for code, path in enumerate(paths.dictionary.to_pylist()):
        if path not in files:
            raise ValueError(f"{path!r} is not a data file of {d.qualified_name}")
        fid, f, dv = files[path]
        idx = np.flatnonzero(codes == code)
        mine = pos[idx]
        bm = dvfmt.from_positions(mine)
        if len(bm) != len(mine):
            raise ValueError(f"positions name a row of {path} twice")
        if bm.max() >= f.record_count:
            raise ValueError(f"position {bm.max()} is past the {f.record_count} rows of {path}")
        gone = bm & dv
        if gone:
            raise ValueError(f"row {gone.min()} of {path} is already deleted")
        fresh = fid in w.added and fid not in w.post  # rows this transaction inserted
        if fresh:
            own[idx] = True
        else:
            ocode[idx], opos[idx] = w.origins_of(fid, mine)
        deletes.append((fid, bm, not fresh))
    for fid, bm, updated in deletes:  # first: the keys they held are free again
        w.delete(fid, bm, updated=updated)
    n = 0
    if not own.all():
        keep = ~own
        post = filter_rows(new, pa.array(keep)) if own.any() else new
        n += write_rows(buf, d, post, DataOp(op), origins=(ocode[keep], opos[keep]))
    if own.any():
        n += write_rows(buf, d, filter_rows(new, pa.array(own)), DataOp(op))
    return n


def _row_positions(positions: Any, n: int) -> pa.Table:
    """``positions`` as a table of ``path`` (string) and ``position`` (int64), ``n`` rows."""
    t = to_table(positions, "positions")
    missing = [c for c in ("path", "position") if c not in t.column_names]
    if missing:
        raise ValueError(f"positions needs columns 'path' and 'position'; it lacks {missing}")
    if t.num_rows != n:
        raise ValueError(f"{t.num_rows} positions given for {n} rows; one each is needed")
    if t.column("path").null_count or t.column("position").null_count:
        raise ValueError("positions has a null path or position")
    try:
        return pa.table(
            {
                "path": t.column("path").cast(pa.string()),
                "position": t.column("position").cast(pa.int64()),
            }
        )
    except ARROW_ERRORS as exc:
        raise ValueError(
            f"positions: path must be strings, position integers: {first_line(exc)}"
        ) from None


def add_files(
    buf: TableData,
    table: str,
    paths: Iterable[str],
    on: Sequence[str] | None,
    updates: bool = False,
    partitions: Sequence[tuple[Any, ...]] | None = None,
    replace: bool = False,
) -> int:
    """Register Parquet files written by someone else (Spark executors); ``updates``:
    their rows are new versions of rows deleted with ``delete_rows(..., updated=True)``;
    ``partitions``: each file's values under the current spec when the writer knows
    them (else read from the files); ``replace``: the files replace every row of
    the partitions they hold (``replace_partitions``)."""
    d = buf.table(table)
    paths = list(paths)
    if partitions is not None and len(partitions) != len(paths):
        raise ValueError(f"{len(partitions)} partitions given for {len(paths)} files")
    w = buf.write(d.namespace, d.name)
    before = set(w.added)
    w.note(DataOp.OVERWRITE if replace else DataOp.MERGE if on else DataOp.APPEND)
    keyed = bool(d.primary_key)
    key_names = d.primary_key if keyed else tuple(on or ())
    key_cols = [c for c in d.columns if c.name in key_names]
    if key_names:
        w.keys = key_names
    n = 0
    targets: set[tuple[Any, ...]] = set()
    adopted: list[tuple[str, pa.Table]] = []  # (file id, its keys) of a keyed table
    for i, p in enumerate(paths):
        known = None if partitions is None else tuple(partitions[i])
        f, inserted = buf.adopt(d, p, w, key_cols, known)
        n += f.record_count
        if inserted is not None:
            if keyed:  # checked once the rows the files replace are gone (below)
                adopted.append((file_key_id(f), inserted))
            w.inserted.append(inserted)  # the keys it inserts (concurrent inserts conflict)
        if replace:
            targets.add(tuple(partitioning.file_values(d, f) or ()))
    if updates:
        w.post |= set(w.added) - before
    new = set(w.added) - before
    if replace and d.spec.is_unpartitioned:  # as overwrite: every other row goes
        for f, _ in buf.files(d.namespace, d.name):
            if file_key_id(f) not in new:
                w.remove(file_key_id(f), f)
        w.guards.append(parse_where("TRUE", d.schema))
        buf.note_read(d, None)
    elif replace and targets:
        _clear_partitions(buf, d, w, sorted(targets, key=repr), keep=new)
    for fid, ins in adopted:  # the keys read from the bytes in hand: unique, then indexed
        keyindex.note_rows(w, d, fid, ins, keyindex.check_new(buf, d, w, ins))
    return n


def delete_rows(
    buf: TableData,
    table: str,
    positions: Mapping[str, Iterable[int]],
    op: str = "delete",
    updated: bool = False,
) -> int:
    if op not in ROW_DELETING:
        raise ValueError(f"op must be 'delete', 'update', 'merge' or 'overwrite', not {op!r}")
    d = buf.table(table)
    files = {f.path: (file_key_id(f), f, dv) for f, dv in buf.files(d.namespace, d.name)}
    w = buf.write(d.namespace, d.name)
    w.note(DataOp(op))
    n = 0
    for path, pos in positions.items():
        if path not in files:
            raise ValueError(f"{path!r} is not a data file of {d.qualified_name}")
        fid, f, dv = files[path]
        bm = dvfmt.from_positions(pos)
        if bm and bm.max() >= f.record_count:
            raise ValueError(f"position {bm.max()} is past the {f.record_count} rows of {path}")
        new = bm - dv
        w.delete(fid, new, updated=updated)
        n += len(new)
    return n


def remove_files(buf: TableData, table: str, paths: Iterable[str]) -> int:
    d = buf.table(table)
    files = {f.path: (file_key_id(f), f) for f, _ in buf.files(d.namespace, d.name)}
    w = buf.write(d.namespace, d.name)
    w.note(DataOp.OVERWRITE)
    n = 0
    for p in paths:
        if p not in files:
            raise ValueError(f"{p!r} is not a data file of {d.qualified_name}")
        fid, f = files[p]
        w.remove(fid, f)
        n += 1
    if n:
        w.guards.append(parse_where("TRUE", d.schema))
    return n
