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
merge          by key columns: matched rows updated (or deleted / kept),
               unmatched source rows inserted; duplicate source keys refused
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

from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lakehouse.data import dv as dvfmt
from lakehouse.data import keyindex, partitioning, scan
from lakehouse.data.buffer import TableData
from lakehouse.data.conform import conform, to_table
from lakehouse.data.literals import ARROW_ERRORS, first_line
from lakehouse.data.predicate import Predicate, evaluate, matches, parse_value, parse_where
from lakehouse.data.table import Origins, TableWrite, concat_origins, file_key_id
from lakehouse.model import DataOp, MergeResult, TableDef

#: the operations ``delete_rows`` can record (those that delete rows by position)
ROW_DELETING = (DataOp.DELETE, DataOp.UPDATE, DataOp.MERGE, DataOp.OVERWRITE)

#: rows per data file written by append/update/merge/overwrite
ROWS_PER_FILE = 1_000_000


def _write_rows(
    buf: TableData,
    d: TableDef,
    rows: pa.Table,
    op: DataOp,
    *,
    origins: Origins | None = None,
) -> int:
    """Write ``rows`` as new data files; ``origins``: they are new versions of rows an
    update or merge replaced (the change feed's post-images), one base row each.
    A write of at most the table's ``inline.max_rows`` rows is inlined: its files
    are inline files, kept in the kvstore (:mod:`lakehouse.data.inline`)."""
    from lakehouse.data import inline

    w = buf.write(d.namespace, d.name)
    w.note(op)
    keyed = bool(d.primary_key)
    encs: list[bytes] | None = None
    if keyed:  # unique keys, or DuplicateKey before anything is written
        encs = keyindex.check_new(buf, d, w, rows)
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


def append(buf: TableData, table: str, data: Any) -> int:
    d = buf.table(table)
    rows = conform(to_table(data), d.schema)
    w = buf.write(d.namespace, d.name)
    w.note(DataOp.APPEND)
    if rows.num_rows == 0:
        return 0
    return _write_rows(buf, d, rows, DataOp.APPEND)


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
        _write_rows(buf, d, rows, DataOp.OVERWRITE)
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
    return _write_rows(buf, d, rows, DataOp.OVERWRITE)


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
            n += _write_rows(
                buf, d, rows, DataOp.UPDATE, origins=concat_origins(origins) if post else None
            )
    return n


def merge(
    buf: TableData,
    table: str,
    data: Any,
    on: Sequence[str] | str | None,
    when_matched: str = "update",
    when_not_matched: str = "insert",
) -> MergeResult:
    d = buf.table(table)
    if on is None:
        if not d.primary_key:
            raise ValueError(
                f"{d.qualified_name} has no primary key: name the merge key columns with on="
            )
        on = d.primary_key
    if isinstance(on, str):
        on = [on]
    on = list(on)
    if not on:
        raise ValueError("on must name at least one key column")
    for k in on:
        if d.schema.get_field_index(k) < 0:
            raise ValueError(f"merge key {k!r} is not a column of {d.qualified_name}")
        if pa.types.is_nested(d.schema.field(k).type):  # Arrow cannot group or join on it
            raise ValueError(
                f"merge key {k!r} of {d.qualified_name} is {d.schema.field(k).type};"
                " a key must be a scalar column"
            )
    if when_matched not in ("update", "delete", "ignore"):
        raise ValueError(
            f"when_matched must be 'update', 'delete' or 'ignore', not {when_matched!r}"
        )
    if when_not_matched not in ("insert", "ignore"):
        raise ValueError(f"when_not_matched must be 'insert' or 'ignore', not {when_not_matched!r}")
    raw = to_table(data, "the merge source")
    # columns the source lacks: matched rows keep their values, inserted rows get nulls
    kept = [c for c in d.columns if c.name not in raw.column_names]
    lenient = pa.schema(
        [f.with_nullable(True) if f.name not in raw.column_names else f for f in d.schema]
    )
    src = conform(raw, lenient, "the merge source")
    if any(src.column(k).null_count for k in on):
        raise ValueError(f"the merge source has null keys in {on}")
    src_keys = src.select(on)
    if src_keys.group_by(on).aggregate([]).num_rows != src.num_rows:
        raise ValueError(f"the merge source has duplicate keys on {on}; each key may appear once")
    key_pred = key_predicate(src_keys, on)
    buf.note_read(d, key_pred)
    fill = kept if when_matched == "update" else []
    key_cols = [c for c in d.columns if c.name in on or c in fill]
    src_idx = src_keys.append_column("_src", pa.array(range(src.num_rows), pa.int64()))
    matched_src: list[int] = []
    old_values: list[pa.Table] = []  # per matched source row, the target's values of `fill`
    hits: list[tuple[str, BitMap]] = []  # marked deleted once the merge is known to be valid
    w0 = buf.write(d.namespace, d.name)
    own_files = set(w0.added) - w0.post  # an earlier update's rows: still updates
    # the committed rows matched, with the source row each matched
    src_origin: list[tuple[np.ndarray, Origins]] = []
    own_src: list[int] = []  # matched rows this transaction added (their update is an insert)
    if d.primary_key and set(on) == set(d.primary_key):  # by the key index: no target scan
        found = _index_matches(buf, d, w0, src, fill)
    else:
        found = _scan_matches(buf, d, on, key_pred, key_cols, src_idx)
    for fid, j in found:
        if j.num_rows != len(set(j.column("_pos").to_pylist())):  # defensive
            raise ValueError("a target row matched two source rows")
        matched_src.extend(j.column("_src").to_pylist())
        if fid in own_files:
            own_src.extend(j.column("_src").to_pylist())
        else:
            src_origin.append(
                (j.column("_src").to_numpy(), w0.origins_of(fid, j.column("_pos").to_numpy()))
            )
        if fill:
            old_values.append(j.select(["_src"] + [c.name for c in fill]))
        if when_matched != "ignore":
            hits.append((fid, BitMap(j.column("_pos").to_numpy())))
    if len(matched_src) != len(set(matched_src)):
        raise ValueError(
            f"a source key matches two rows of {d.qualified_name} on {on}; merge needs unique "
            "target keys"
        )
    matched = BitMap(matched_src)
    is_matched = pa.array([i in matched for i in range(src.num_rows)], pa.bool_())
    out = []
    post_rows: pa.Table | None = None
    updated = deleted = inserted = 0
    if when_matched == "update" and matched:
        upd = _with_target_values(src.filter(is_matched), old_values, fill)
        if own_src:  # rows of this transaction's own files: their new versions are inserts
            own = BitMap(own_src)
            is_own = pa.array([i in own for i in matched], pa.bool_())
            out.append(upd.filter(is_own))
            upd = upd.filter(pc.invert(is_own))
        post_rows = upd
        updated = len(matched)
    elif when_matched == "delete":
        deleted = len(matched)
    if when_not_matched == "insert":
        new = src.filter(pc.invert(is_matched))
        if new.num_rows:
            for c in kept:
                if not d.schema.field(c.name).nullable:
                    raise ValueError(
                        f"the merge source lacks column {c.name!r}, which may not be null, "
                        f"and {new.num_rows} of its rows would be inserted"
                    )
            out.append(new)
            inserted = new.num_rows
    # valid: only now does the transaction see the merge
    w = buf.write(d.namespace, d.name)
    w.note(DataOp.MERGE)
    if not d.primary_key:  # (a keyed table's writes list their keys themselves)
        w.keys = tuple(on)
    for fid, positions in hits:
        w.delete(fid, positions, updated=when_matched == "update")
    if inserted and not d.primary_key:
        w.inserted.append(out[-1].select(on))
    if post_rows is not None and post_rows.num_rows:
        # post_rows are the matched source rows not in own files, in source order
        srcs = np.concatenate([s for s, _ in src_origin])
        fids, pos = concat_origins([o for _, o in src_origin])
        order = np.argsort(srcs, kind="stable")
        origins = (fids[order], pos[order])
        _write_rows(buf, d, post_rows.cast(d.schema), DataOp.MERGE, origins=origins)
    if out:
        rows = pa.concat_tables([t.cast(d.schema) for t in out])
        _write_rows(buf, d, rows, DataOp.MERGE)
    return MergeResult(inserted=inserted, updated=updated, deleted=deleted)


def _scan_matches(
    buf: TableData,
    d: TableDef,
    on: list[str],
    key_pred: Predicate,
    key_cols: list[Any],
    src_idx: pa.Table,
) -> Iterator[tuple[str, pa.Table]]:
    """Target rows matching source keys, found by reading the table: per file, its
    id and the rows (``_src``: the source row, ``_pos``, the key and fill columns)."""
    files = buf.files(d.namespace, d.name)
    by_path = {f.path: file_key_id(f) for f, _ in files}
    for f, hit in scan.matching_positions(buf.ctx.data, d, files, key_pred, columns=key_cols):
        if not hit.num_rows:
            continue
        j = hit.join(src_idx, keys=on, join_type="inner")
        if j.num_rows:
            yield by_path[f.path], j


def _index_matches(
    buf: TableData, d: TableDef, w: TableWrite, src: pa.Table, fill: list[Any]
) -> Iterator[tuple[str, pa.Table]]:
    """As :func:`_scan_matches`, by the primary-key index: only the files holding a
    matched row are read, and only when the source lacks columns to ``fill``."""
    hits = keyindex.live(buf, d, w, keyindex.encode(d, src))
    by_file: dict[str, list[tuple[int, int]]] = {}
    for i, (fid, p) in hits.items():
        by_file.setdefault(fid, []).append((p, i))
    for fid in sorted(by_file):
        pairs = sorted(by_file[fid])
        pos = np.array([p for p, _ in pairs], dtype=np.uint32)
        j = pa.table(
            {
                "_src": pa.array([i for _, i in pairs], pa.int64()),
                "_pos": pa.array(pos, pa.uint32()),
            }
        )
        if fill:
            fs = buf.file_state(d, fid)
            assert fs is not None  # live: the index lookup checked it
            t = scan.read_one(buf.ctx.data, d, fs, fill, None, fill, with_positions=True)
            rows = t.take(pa.array(np.searchsorted(t.column("_pos").to_numpy(), pos)))
            for c in fill:
                j = j.append_column(c.name, rows.column(c.name))
        yield fid, j


def _with_target_values(updates: pa.Table, old_values: list[pa.Table], fill: list[Any]) -> pa.Table:
    """``updates`` (matched source rows, in source order) with the columns ``fill``,
    which the source lacks, taken from the target rows they matched."""
    if not fill:
        return updates
    old = pa.concat_tables(old_values).sort_by("_src")  # one row per matched source row
    for c in fill:
        i = updates.schema.get_field_index(c.name)
        col = old.column(c.name).cast(updates.schema.field(i).type)
        updates = updates.set_column(i, updates.schema.field(i), col)
    return updates


def key_predicate(keys: pa.Table, on: list[str]) -> Predicate:
    """Rows whose key is in ``keys``: ``is_in`` on one column, a bounding box plus
    exact membership on several."""
    if len(on) == 1:
        expr = pc.field(on[0]).isin(keys.column(0))
    else:
        expr = None
        for k in on:
            part = pc.field(k).isin(keys.column(k).unique())
            expr = part if expr is None else expr & part
    assert expr is not None
    return Predicate(expr, frozenset(on), f"merge keys on {on}")


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
