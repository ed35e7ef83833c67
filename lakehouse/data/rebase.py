"""Committing table data over concurrent versions: per-row checks, then keys.

The commit protocol (:mod:`lakehouse.commit`) calls :func:`rebase` inside its
kvstore transaction, at head ``w``, with the records of the versions
``v+1..w`` committed since this transaction began at ``v``. For each table
the transaction changed:

1. **The matrix** (:data:`lakehouse.conflicts.DATA`) rules out the pairs of
   operations that can never be rebased (anything against a concurrent
   ``restore_table``).
2. **Rows.** Positions this transaction deleted (delete, update, merge,
   overwrite ``where``) or files it removed, against those a concurrent
   version deleted or removed. Disjoint rows rebase. The same row deleted
   by two pure deletes rebases too (the union is the result either order
   gives); any other overlap is ``RetryableConflict``: one of them would
   overwrite the other's update (a lost update).
3. **Rows inserted meanwhile** (read from the concurrent version's new
   files, pruned by their bounds first): conflict if they match an
   ``overwrite`` predicate of ours (the overwrite would not have replaced
   them), carry a key we inserted by ``merge`` (no duplicate keys), or, under
   SERIALIZABLE, match any predicate we read. Rows *deleted* meanwhile
   conflict under SERIALIZABLE when they match a predicate we read.
4. **Keys at the head.** Our new deletion vectors are unioned with the
   head's. A file a concurrent compaction rewrote is followed to its new
   file: a position ``p`` of a source becomes
   ``offset(source) + p - rank(deleted at planning, p)`` in the output, so
   a delete is never lost and never lands on the wrong row. Our own
   compaction does the reverse: rows deleted in its sources since it was
   planned are deleted in its output, so it never resurrects a row, in
   either commit order (Lance #6653, delta-rs #3337).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyroaring import BitMap

import kvstore
from lakehouse import conflicts, keys
from lakehouse.data import dv as dvfmt
from lakehouse.data import record, scan
from lakehouse.data.predicate import Predicate, matches
from lakehouse.data.table import FileState, LazyFiles, TableWrite
from lakehouse.errors import RetryableConflict
from lakehouse.model import DataFile, Rewrite, TableChange, TableDef, VersionInfo

if TYPE_CHECKING:
    from kvstore.objstore import ObjectStore

_PURE_DELETE = frozenset({"delete", "append", "compact"})  # compaction moves rows only


def translate(r: Rewrite, src: str, positions: BitMap) -> BitMap:
    """Positions of source ``src`` of compaction ``r`` in its output file."""
    offset = 0
    for fid, rows, raw in r.sources:
        dv = dvfmt.decode(raw)
        if fid == src:
            return BitMap(offset + p - dv.rank(p) for p in positions if p not in dv)
        offset += rows - len(dv)
    raise KeyError(src)


def untranslate(r: Rewrite, positions: BitMap) -> dict[str, BitMap]:
    """Where positions of compaction ``r``'s output came from: ``{source: positions}``."""
    out: dict[str, BitMap] = {}
    offset = 0
    for fid, rows, raw in r.sources:
        live = BitMap(range(rows)) - dvfmt.decode(raw)
        n = len(live)
        mine = [q - offset for q in positions if offset <= q < offset + n]
        if mine:
            out[fid] = BitMap(live[i] for i in mine)
        offset += n
    return out


def _compacted(change: TableChange) -> set[str]:
    return {fid for r in change.rewrites for fid, _, _ in r.sources}


def _outputs(change: TableChange) -> set[str]:
    return {r.new_id for r in change.rewrites}


def rebase(
    ktx: kvstore.Transaction,
    store: ObjectStore,
    d: TableDef,
    w: TableWrite,
    base: Mapping[str, FileState],
    reads: Sequence[Predicate],
    records: Sequence[VersionInfo],
) -> tuple[list[tuple[bytes, bytes | None]], TableChange]:
    """Check ``w`` against ``records`` and return its kvstore writes and record."""
    theirs = [(r.version, c) for r in records for c in r.data if c.table == w.qualified]
    for u, c in theirs:
        outcome = conflicts.data_outcome(w.ops, c.ops)
        if outcome != conflicts.COMPATIBLE and outcome != conflicts.REBASE:
            raise RetryableConflict(
                f"version {u} changed the rows of {w.qualified} ({', '.join(c.ops)}) in a way "
                f"this transaction ({', '.join(w.ops)}) cannot be rebased over; re-run it",
                version=u,
                objects=(("table", w.qualified),),
            )
        _check_inserted(ktx, store, d, w, reads, u, c, base)
    _check_rows(w, theirs)
    head = LazyFiles(ktx.get, w.ns, w.name) if theirs else base
    return _writes(w, head, theirs)


def check_reads(
    ktx: kvstore.Transaction,
    store: ObjectStore,
    d: TableDef,
    base: Mapping[str, FileState],
    reads: Sequence[Predicate],
    records: Sequence[VersionInfo],
) -> None:
    """SERIALIZABLE reads of a table this transaction does not write: step 3 only."""
    w = TableWrite(d.namespace, d.name)
    for r in records:
        for c in r.data:
            if c.table == w.qualified:
                _check_inserted(ktx, store, d, w, reads, r.version, c, base)


def _check_rows(w: TableWrite, theirs: Sequence[tuple[int, TableChange]]) -> None:
    """Step 2 over every concurrent version in order, following our rows through
    their compactions (a row a compaction moved keeps its identity)."""
    mine_moved = {fid for r in w.rewrites for fid, _, _ in r.sources}
    touched: dict[str, BitMap | None] = {}  # None: the whole file (removed)
    for fid, pos in w.deletes.items():
        if fid not in w.added and fid not in mine_moved:
            touched[fid] = pos
    for fid in w.removed:
        if fid not in mine_moved:
            touched[fid] = None
    for r in w.rewrites:  # rows we changed in our own compaction's output: their sources
        mine_out = w.deletes.get(r.new_id)
        if mine_out:
            for src, p in untranslate(r, mine_out).items():
                touched[src] = (touched.get(src) or BitMap()) | p
    pure_mine = set(w.ops) <= _PURE_DELETE
    for u, c in theirs:
        moved = _compacted(c)
        pure = pure_mine and set(c.ops) <= _PURE_DELETE
        for fid, mine_pos in touched.items():
            theirs_removed = fid in c.removed and fid not in moved
            if not (theirs_removed or fid in c.deleted):
                continue
            disjoint = (
                not theirs_removed
                and mine_pos is not None
                and (pure or not (mine_pos & dvfmt.decode(c.deleted[fid])))
            )
            if disjoint:
                continue
            raise RetryableConflict(
                f"version {u} also changed rows of {w.qualified} (data file {fid}) that this "
                f"transaction ({'/'.join(w.ops)}) changed; re-run it on the latest version",
                version=u,
                objects=(("table", w.qualified),),
            )
        for r in c.rewrites:  # follow our rows into their compaction's output
            acc = BitMap()
            for src, rows, _ in r.sources:
                if src in touched:
                    was = touched.pop(src)
                    acc |= translate(r, src, BitMap(range(rows)) if was is None else was)
            if acc and r.new_id:
                touched[r.new_id] = touched.get(r.new_id) or BitMap()
                touched[r.new_id] |= acc  # type: ignore[operator]


def _check_inserted(
    ktx: kvstore.Transaction,
    store: ObjectStore,
    d: TableDef,
    w: TableWrite,
    reads: Sequence[Predicate],
    u: int,
    c: TableChange,
    base: Mapping[str, FileState],
) -> None:
    preds = list(w.guards) + list(reads)
    new_ids = [fid for fid in c.added if fid not in _outputs(c)]
    if not (preds or w.inserted) or not (new_ids or (reads and (c.deleted or c.removed))):
        return

    def record_of(fid: str) -> DataFile | None:
        if fid in base:
            return base[fid][0]
        raw = ktx.get(keys.data_file_key(w.ns, w.name, fid))
        return None if raw is None else record.decode_file(raw)

    def conflict(why: str) -> RetryableConflict:
        return RetryableConflict(
            f"version {u} {why} of {w.qualified}; re-run this transaction on the latest version",
            version=u,
            objects=(("table", w.qualified),),
        )

    inserted: list[FileState] = []
    for fid in new_ids:
        f = record_of(fid)
        if f is None:
            raise conflict(f"added data file {fid}, since removed,")
        inserted.append((f, BitMap()))
    for p in preds:
        for _, hit in scan.matching_positions(store, d, inserted, p, columns=[]):
            if hit.num_rows:
                what = "an overwrite" if any(p is g for g in w.guards) else "a SERIALIZABLE read"
                raise conflict(f"inserted rows matching {what} ({p.text!r})")
    if w.inserted and inserted:
        mine = pa.concat_tables(w.inserted)
        on = list(w.keys)
        cols = [col for col in d.columns if col.name in on]
        for f, dvb in inserted:
            t = scan._one(store, d, (f, dvb), cols, None, cols)
            if t.num_rows and t.join(mine, keys=on, join_type="inner").num_rows:
                raise conflict(f"inserted rows with a key this merge inserts (on {on})")
    if not reads:
        return
    gone: list[FileState] = []
    moved = _compacted(c)
    for fid, raw in c.deleted.items():
        f = record_of(fid)
        if f is not None:
            gone.append((f, BitMap(range(f.record_count)) - dvfmt.decode(raw)))
    for fid in c.removed:
        if fid not in moved:
            f = record_of(fid)
            if f is not None:
                gone.append((f, base[fid][1] if fid in base else BitMap()))
    for p in reads:
        for f, keep_only_deleted in gone:
            t = scan._one(store, d, (f, keep_only_deleted), list(d.columns), None, list(d.columns))
            if t.num_rows and scan.count_true(matches(t, p)):
                raise conflict(f"deleted rows matching a SERIALIZABLE read ({p.text!r})")


def _writes(
    w: TableWrite, head: Mapping[str, FileState], theirs: list[tuple[int, TableChange]]
) -> tuple[list[tuple[bytes, bytes | None]], TableChange]:
    out: list[tuple[bytes, bytes | None]] = []
    consumed: dict[str, tuple[int, Rewrite]] = {}
    for u, c in theirs:
        for r in c.rewrites:
            for fid, _, _ in r.sources:
                consumed[fid] = (u, r)

    def conflict(u: int, why: str) -> RetryableConflict:
        return RetryableConflict(
            f"version {u} {why}; re-run this transaction on the latest version",
            version=u,
            objects=(("table", w.qualified),),
        )

    new_dvs: dict[str, BitMap] = {}
    deleted_base: dict[str, BitMap] = {}
    removed_now: set[str] = set()
    updated_base: dict[str, BitMap] = {}
    for fid, pos in w.deletes.items():
        if fid in w.added:
            continue
        tgt, tpos, tupd = fid, pos, w.updated.get(fid)
        while tgt not in head:
            hit = consumed.get(tgt)
            if hit is None:
                raise conflict(theirs[-1][0] if theirs else 0, f"removed data file {tgt}")
            tpos = translate(hit[1], tgt, tpos)
            if tupd:
                tupd = translate(hit[1], tgt, tupd)
            tgt = hit[1].new_id
            if not tgt:
                break
        if not tgt:
            continue
        cur = new_dvs.get(tgt, head[tgt][1])
        fresh = tpos - cur
        if fresh:
            new_dvs[tgt] = cur | fresh
            deleted_base[tgt] = deleted_base.get(tgt, BitMap()) | fresh
            if tupd and tupd & fresh:
                updated_base[tgt] = updated_base.get(tgt, BitMap()) | (tupd & fresh)
    mine_moved = {fid for r in w.rewrites for fid, _, _ in r.sources}
    for fid in w.removed:
        if fid in mine_moved:
            continue
        if fid in head:
            removed_now.add(fid)
            continue
        hit = consumed.get(fid)
        if hit is None:
            continue  # already removed by someone else (a pure removal overlap was checked)
        u, r = hit
        if not all(s in w.removed for s, _, _ in r.sources):
            raise conflict(u, f"compacted data file {fid} together with files this overwrite keeps")
        if r.new_id in head:
            removed_now.add(r.new_id)
    extra: dict[str, BitMap] = {}
    for r in w.rewrites:
        acc = BitMap()
        for src, rows, raw in r.sources:
            plan = dvfmt.decode(raw)
            if src in head:
                newly = head[src][1] - plan
                removed_now.add(src)
            elif src in consumed:
                raise conflict(consumed[src][0], f"compacted data file {src} as well")
            else:  # removed whole by an overwrite or restore: its rows are gone
                newly = BitMap(range(rows)) - plan
            if newly and r.new_id:
                acc |= translate(r, src, newly)
        if acc:
            extra[r.new_id] = acc
    for fid in sorted(removed_now):
        out.append((keys.data_file_key(w.ns, w.name, fid), None))
        out.append((keys.dv_key(w.ns, w.name, fid), None))
    for fid, bm in sorted(new_dvs.items()):
        out.append((keys.dv_key(w.ns, w.name, fid), dvfmt.encode(bm)))
    for fid, f in sorted(w.added.items()):
        out.append((keys.data_file_key(w.ns, w.name, fid), record.encode_file(f)))
        dv = (
            w.added_dvs.get(fid, BitMap()) | w.deletes.get(fid, BitMap()) | extra.get(fid, BitMap())
        )
        if dv:
            out.append((keys.dv_key(w.ns, w.name, fid), dvfmt.encode(dv)))
        elif fid in head and head[fid][1]:  # re-added whole (restore): clear its old DV
            out.append((keys.dv_key(w.ns, w.name, fid), None))
    # files removed at the head: ours, plus the outputs of concurrent compactions
    # of files ours replaced
    return out, w.freeze().change(deleted_base, removed_now | set(w.removed), updated_base)
