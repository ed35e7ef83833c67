"""Rebasing one table's write over concurrent versions: the policy, without I/O.

:func:`plan` is a pure function of the transaction's table write (a
:class:`~lakehouse.data.table.TableIntent`), the table's files at the head
(any ``Mapping[str, FileState]``; the commit passes a lazy one, tests a dict)
and the changes the versions committed since the transaction began made to
the table (``(version, TableChange)`` pairs, oldest first). It never reads a
kvstore, an object store or a Parquet file. It returns a :class:`RebasePlan`:

* ``checks``: the rows of concurrent versions that must be *read* before the
  write can be trusted (:class:`RowChecks`: the files a version added, to
  match against our overwrite predicates, merge keys and SERIALIZABLE reads;
  the rows it deleted, against those reads). :mod:`lakehouse.data.rebase`
  runs them, in order, before anything else.
* ``result``: either a :class:`Conflict` (the version and the message of the
  ``RetryableConflict`` to raise once the checks pass) or :class:`Rebased`,
  the write at the head: files removed, the deletion vectors to write, the
  added files with their initial deletion vectors, and the version record's
  :class:`~lakehouse.model.TableChange`.

The steps, in the order their conflicts are reported:

1. **The matrix** (:func:`lakehouse.conflicts.data_outcome`), version by
   version: pairs of operations that can never be rebased (anything against
   a concurrent ``restore_table``).
2. **Rows both changed** (:func:`check_rows`): positions we deleted or files
   we removed, against those a concurrent version deleted or removed,
   followed through concurrent compactions. Disjoint rows rebase; the same
   row deleted by two pure deletes too (their union is either order's
   result); any other overlap is a lost update.
3. **Keys at the head** (:func:`lakehouse.data.rebase_head.rebase_at_head`):
   our deletes followed through concurrent compactions and unioned with the
   head's deletion vectors, our removals and compactions applied, the
   record's entry built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyroaring import BitMap, FrozenBitMap

from lakehouse import conflicts
from lakehouse.data import dv as dvfmt
from lakehouse.data.predicate import Predicate
from lakehouse.data.rebase_head import (
    Concurrent,
    Conflict,
    Rebased,
    Unrebasable,
    compacted_by,
    consumed_by,
    follow,
    rebase_at_head,
    translate,
    untranslate,
)
from lakehouse.data.rewrites import gather, output_ids, outputs, place
from lakehouse.data.table import FileState, TableIntent
from lakehouse.model import DataOp, TableChange, VersionInfo

#: operations that only delete or move rows: two of them deleting the same row agree
_PURE_DELETE = frozenset({DataOp.DELETE, DataOp.APPEND, DataOp.COMPACT})

__all__ = [
    "Concurrent",
    "Conflict",
    "RebasePlan",
    "Rebased",
    "RowChecks",
    "VersionRows",
    "changes_to",
    "check_matrix",
    "check_rows",
    "plan",
    "plan_reads",
    "rows_touched",
    "translate",
    "untranslate",
    "version_rows",
]


@dataclass(frozen=True)
class VersionRows:
    """The rows one concurrent version inserted or deleted that must be read."""

    version: int
    #: files it added (compaction outputs excluded): matched against our
    #: predicates and merge keys
    inserted: tuple[str, ...]
    #: positions it deleted, by file, and files it removed whole (not by a
    #: compaction): matched against SERIALIZABLE reads (empty without reads)
    deleted: tuple[tuple[str, FrozenBitMap], ...] = ()
    removed: tuple[str, ...] = ()
    #: of ``inserted``, files a later concurrent compaction rewrote: where their
    #: rows are at the head, ``(file, head file, positions in it)`` (rows a
    #: compaction moved are the same rows, so they are read there)
    moved: tuple[tuple[str, str, FrozenBitMap], ...] = ()


@dataclass(frozen=True)
class RowChecks:
    """What must be read before the write can commit, and what to match it against."""

    ns: str
    name: str
    #: overwrite predicates: rows inserted meanwhile must not match them
    guards: tuple[Predicate, ...]
    #: SERIALIZABLE read predicates: rows inserted or deleted meanwhile must not match
    reads: tuple[Predicate, ...]
    #: merge key columns and the rows this transaction inserted by them
    keys: tuple[str, ...]
    key_rows: tuple[pa.Table, ...]
    #: per concurrent version with something to read, oldest first
    versions: tuple[VersionRows, ...]

    @property
    def qualified(self) -> str:
        return f"{self.ns}.{self.name}"


@dataclass(frozen=True)
class RebasePlan:
    """Row checks to run first, then the rebased write or the conflict."""

    checks: RowChecks
    result: Rebased | Conflict


def changes_to(table: str, records: Iterable[VersionInfo]) -> list[tuple[int, TableChange]]:
    """The changes ``records`` made to the rows of ``table`` (qualified name), in order."""
    return [(r.version, c) for r in records for c in r.data if c.table == table]


def plan(
    w: TableIntent,
    head: Mapping[str, FileState],
    theirs: Concurrent,
    reads: Sequence[Predicate] = (),
) -> RebasePlan:
    """Rebase ``w`` over the concurrent changes ``theirs`` onto ``head``; ``reads``
    are the SERIALIZABLE predicates the transaction read the table with."""
    versions: list[VersionRows] = []
    result: Rebased | Conflict
    try:
        for u, c in theirs:
            check_matrix(w, u, c)
            rows = version_rows(w.guards, reads, bool(w.inserted), u, c)
            if rows is not None:
                versions.append(rows)
        check_rows(w, theirs)
        result = rebase_at_head(w, head, theirs)
    except Unrebasable as stop:
        result = stop.conflict
    versions = [_moved(v, head, theirs) for v in versions]
    return RebasePlan(_row_checks(w, reads, versions), result)


def _moved(v: VersionRows, head: Mapping[str, FileState], theirs: Concurrent) -> VersionRows:
    """``v`` with where the rows of its inserted files that later concurrent
    compactions rewrote are at the head."""
    later = [(u, c) for u, c in theirs if u > v.version]
    consumed = consumed_by(later)
    moved = []
    for fid in v.inserted:
        if fid not in consumed or fid in head:
            continue
        rows = next(n for s, n, _ in consumed[fid][1].sources if s == fid)
        for tgt, pos, _ in follow(fid, BitMap(range(rows)), None, head, consumed):
            if tgt and pos:
                moved.append((fid, tgt, FrozenBitMap(pos)))
    return dataclasses.replace(v, moved=tuple(moved)) if moved else v


def plan_reads(ns: str, name: str, theirs: Concurrent, reads: Sequence[Predicate]) -> RowChecks:
    """The row checks of SERIALIZABLE reads of a table the transaction does not write."""
    found = (version_rows((), reads, False, u, c) for u, c in theirs)
    return RowChecks(ns, name, (), tuple(reads), (), (), tuple(v for v in found if v))


def _row_checks(w: TableIntent, reads: Sequence[Predicate], v: list[VersionRows]) -> RowChecks:
    return RowChecks(w.ns, w.name, tuple(w.guards), tuple(reads), w.keys, w.inserted, tuple(v))


# -- step 1: the matrix ------------------------------------------------------------


def check_matrix(w: TableIntent, u: int, c: TableChange) -> None:
    """Pairs of operations that can never be rebased (:data:`lakehouse.conflicts.DATA`)."""
    outcome = conflicts.data_outcome(w.ops, c.ops)
    if outcome != conflicts.COMPATIBLE and outcome != conflicts.REBASE:
        raise Unrebasable(
            u,
            f"version {u} changed the rows of {w.qualified} ({', '.join(c.ops)}) in a way "
            f"this transaction ({', '.join(w.ops)}) cannot be rebased over; re-run it",
        )


def version_rows(
    guards: Sequence[Predicate],
    reads: Sequence[Predicate],
    has_keys: bool,
    u: int,
    c: TableChange,
) -> VersionRows | None:
    """What of version ``u``'s change must be read, if anything."""
    inserted = tuple(fid for fid in c.added if fid not in _outputs(c))
    if not (guards or reads or has_keys):
        return None
    if not (inserted or (reads and (c.deleted or c.removed))):
        return None
    if not reads:
        return VersionRows(u, inserted)
    moved = _compacted(c)
    deleted = tuple((fid, FrozenBitMap(dvfmt.decode(raw))) for fid, raw in c.deleted.items())
    removed = tuple(fid for fid in c.removed if fid not in moved)
    if not (inserted or deleted or removed):
        return None  # a compaction: it moved rows, inserted and deleted none
    return VersionRows(u, inserted, deleted, removed)


# -- step 2: rows both changed -----------------------------------------------------

#: rows this write changed, by file of its base state; None: the whole file
Touched = dict[str, BitMap | None]


def check_rows(w: TableIntent, theirs: Concurrent) -> None:
    """Rows both changed, over every concurrent version in order, following our rows
    through their compactions (a row a compaction moved keeps its identity)."""
    touched = rows_touched(w)
    pure_mine = set(w.ops) <= _PURE_DELETE
    for u, c in theirs:
        _check_overlap(w, touched, u, c, pure=pure_mine and set(c.ops) <= _PURE_DELETE)
        _follow_compactions(touched, c)


def rows_touched(w: TableIntent) -> Touched:
    """The rows ``w`` deletes or removes, by file of its base state (rows it deletes
    in its own compaction's output are followed back to their sources)."""
    mine_moved = compacted_by(w.rewrites)
    touched: Touched = {}
    for fid, pos in w.deletes.items():
        if fid not in w.added and fid not in mine_moved:
            touched[fid] = BitMap(pos)
    for fid in w.removed:
        if fid not in mine_moved:
            touched[fid] = None
    for r in w.rewrites:
        for out, _ in outputs(r):
            mine_out = w.deletes.get(out)
            if mine_out:
                for src, p in untranslate(r, gather(r, out, mine_out)).items():
                    touched[src] = (touched.get(src) or BitMap()) | p
    return touched


def _check_overlap(w: TableIntent, touched: Touched, u: int, c: TableChange, pure: bool) -> None:
    moved = _compacted(c)
    for fid, mine_pos in touched.items():
        theirs_removed = fid in c.removed and fid not in moved
        if not (theirs_removed or fid in c.deleted):
            continue
        disjoint = (
            not theirs_removed
            and mine_pos is not None
            and (pure or not (mine_pos & dvfmt.decode(c.deleted[fid])))
        )
        if not disjoint:
            raise Unrebasable(
                u,
                f"version {u} also changed rows of {w.qualified} (data file {fid}) that this "
                f"transaction ({'/'.join(w.ops)}) changed; re-run it on the latest version",
            )


def _follow_compactions(touched: Touched, c: TableChange) -> None:
    """Move the rows in ``touched`` that ``c``'s compactions rewrote to their outputs."""
    for r in c.rewrites:
        acc = BitMap()
        for src, rows, _ in r.sources:
            if src in touched:
                was = touched.pop(src)
                acc |= translate(r, src, BitMap(range(rows)) if was is None else was)
        for out, p in place(r, acc).items():
            touched[out] = (touched.get(out) or BitMap()) | p


def _compacted(change: TableChange) -> set[str]:
    return compacted_by(change.rewrites)


def _outputs(change: TableChange) -> set[str]:
    return output_ids(change.rewrites)
