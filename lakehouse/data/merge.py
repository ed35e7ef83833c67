"""``merge``: upsert a source into a table by key columns (a transaction's operation).

The target rows each source row matches are found one of two ways:

* on the table's primary key, through the key index
  (:mod:`lakehouse.data.keyindex`): one point read per source key, and no
  file of the target is read unless the source lacks columns (then only the
  files holding matched rows, for those columns); the cost follows the source;
* on other columns, by reading the target's key columns (pruned by the
  source keys' bounds) and joining.

Then matched rows are marked deleted (``update``: their new versions are
written, the change feed's post-images; ``delete``: gone; ``ignore``: kept)
and unmatched ones inserted, all only once the merge is known to be valid.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lakehouse.data import keyindex, ops, scan
from lakehouse.data.buffer import TableData
from lakehouse.data.conform import conform, to_table
from lakehouse.data.predicate import Predicate
from lakehouse.data.rows import filter_rows, join, plain, take_rows
from lakehouse.data.table import Origins, TableWrite, concat_origins, file_key_id
from lakehouse.errors import MergeKeyError
from lakehouse.model import DataOp, MergeResult, TableDef


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
        raise MergeKeyError(f"the merge source has null keys in {on}")
    src_keys = src.select(on)
    if src_keys.group_by(on).aggregate([]).num_rows != src.num_rows:
        raise MergeKeyError(
            f"the merge source has duplicate keys on {on}; each key may appear once"
        )
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
    by_key = bool(d.primary_key) and set(on) == set(d.primary_key)
    if by_key:  # by the key index: no target scan
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
        raise MergeKeyError(
            f"a source key matches two rows of {d.qualified_name} on {on}; merge needs unique "
            "target keys"
        )
    matched = BitMap(matched_src)
    is_matched = pa.array([i in matched for i in range(src.num_rows)], pa.bool_())
    out = []
    post_rows: pa.Table | None = None
    updated = deleted = inserted = 0
    if when_matched == "update" and matched:
        upd = _with_target_values(filter_rows(src, is_matched), old_values, fill)
        if own_src:  # rows of this transaction's own files: their new versions are inserts
            own = BitMap(own_src)
            is_own = pa.array([i in own for i in matched], pa.bool_())
            out.append(filter_rows(upd, is_own))
            upd = filter_rows(upd, pc.invert(is_own))
        post_rows = upd
        updated = len(matched)
    elif when_matched == "delete":
        deleted = len(matched)
    if when_not_matched == "insert":
        new = filter_rows(src, pc.invert(is_matched))
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
        # keys the index found live (now deleted) and keys it found free: no check again
        ops.write_rows(
            buf, d, post_rows.cast(d.schema), DataOp.MERGE, origins=origins, keys_checked=by_key
        )
    if out:
        rows = pa.concat_tables([t.cast(d.schema) for t in out])
        ops.write_rows(buf, d, rows, DataOp.MERGE, keys_checked=by_key)
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
        j = join(hit, src_idx, on, "inner")
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
            rows = take_rows(t, pa.array(np.searchsorted(t.column("_pos").to_numpy(), pos)))
            for c in fill:
                j = j.append_column(c.name, rows.column(c.name))
        yield fid, j


def _with_target_values(updates: pa.Table, old_values: list[pa.Table], fill: list[Any]) -> pa.Table:
    """``updates`` (matched source rows, in source order) with the columns ``fill``,
    which the source lacks, taken from the target rows they matched."""
    if not fill:
        return updates
    old = pa.concat_tables(old_values)  # one row per matched source row
    old = take_rows(old, pc.sort_indices(old.column("_src")))
    for c in fill:
        i = updates.schema.get_field_index(c.name)
        col = old.column(c.name).cast(updates.schema.field(i).type)
        updates = updates.set_column(i, updates.schema.field(i), col)
    return updates


def key_predicate(keys: pa.Table, on: list[str]) -> Predicate:
    """Rows whose key is in ``keys``: ``is_in`` on one column, a bounding box plus
    exact membership on several."""
    if len(on) == 1:
        expr = pc.field(on[0]).isin(plain(keys.column(0)))
    else:
        expr = None
        for k in on:
            part = pc.field(k).isin(plain(keys.column(k).unique()))
            expr = part if expr is None else expr & part
    assert expr is not None
    return Predicate(expr, frozenset(on), f"merge keys on {on}")
